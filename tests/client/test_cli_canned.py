"""The client against a console or gateway that says what no ServeDeck says: a local server
answering canned responses (tests/client/conftest.py), the client's own httpx and openai
talking to it. What reaches the terminal stays safe; a redirect never carries a credential."""

import pytest
from servedeck import cli

HOSTILE = "\x1b]0;owned\x07title\tkept\n\x1b[2Jcleared\n"
SHOWN = "\\x1b]0;owned\\x07title\tkept\n\\x1b[2Jcleared\n"


@pytest.fixture
def console(canned, monkeypatch, tmp_path):
    made = canned()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("SERVEDECK_URL", made.url)
    monkeypatch.setenv("SERVEDECK_TOKEN", "sdp_canned")
    monkeypatch.delenv("SERVEDECK_GATEWAY_URL", raising=False)
    return made


def test_render_prints_the_consoles_document_made_safe(console, tmp_path, capsys):
    console.answer(
        "POST",
        "/api/v1/applications/render",
        200,
        {"objects": [], "text": HOSTILE, "warnings": [], "note": "a \x1b[8mnote"},
    )
    manifest = tmp_path / "m.yaml"
    manifest.write_text("spec: {name: x}\n")
    assert cli.main(["app", "render", "-f", str(manifest)]) == 0
    said = capsys.readouterr()
    assert said.out == SHOWN
    assert said.err == "a \\x1b[8mnote\n"


@pytest.mark.parametrize(
    ("verb", "path"),
    [
        (["embed", "m", "hello", "--key", "sdk_secret"], "/v1/embeddings"),
        (["chat", "m", "hello", "--key", "sdk_secret"], "/v1/chat/completions"),
        (["app", "list"], "/api/v1/applications"),
    ],
)
def test_a_redirect_is_refused_and_the_credential_stays_home(console, canned, verb, path, capsys):
    elsewhere = canned()
    target = f"{elsewhere.url}{path}"
    console.answer("POST", path, 307, b"", Location=target)
    console.answer("GET", path, 302, b"", Location=target)
    assert cli.main(verb) == 1
    said = capsys.readouterr().err
    who = "console" if path.startswith("/api/") else "gateway"
    assert said.startswith(f"error: the {who} answered 30"), said
    assert f"a redirect to {target}; nothing was sent there." in said, said
    assert elsewhere.seen == [], "the token or API key went along"


def test_promote_prints_the_rollout_and_its_decision(console, capsys):
    console.answer(
        "POST",
        "/api/v1/applications/bge-embed/promote",
        200,
        {
            "state": "Promoting",
            "stableRevision": 1,
            "canaryRevision": 2,
            "weight": 100,
            "step": 2,
            "steps": [10, 50],
            "stepStartedAt": None,
            "canaryPhase": "Running",
            "decisions": [{"decision": "promote", "by": "user", "reason": "promoted by dan"}],
        },
    )
    assert cli.main(["app", "promote", "bge-embed"]) == 0
    assert capsys.readouterr().out == (
        "application/bge-embed revision 2 promoted: Promoting, 100% of the requests\n"
        "  promoted by dan\n"
    )
