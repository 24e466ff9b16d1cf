"""What the client says without a console: `--help` with an example on every verb, usage
errors exit 2, shell completion for bash and zsh written from the parser, and the config file
made private."""

import argparse
import stat
import subprocess

import pytest
from servedeck import cli, completion, config


def leaves(parser: argparse.ArgumentParser, path=()):
    children = completion._subparsers(parser)
    if not children:
        yield path
    for name, child in children.items():
        yield from leaves(child, (*path, name))


VERBS = list(leaves(cli.build_parser()))


def test_every_verb_is_listed():
    flat = {" ".join(v) for v in VERBS}
    wanted = {
        "login", "logout", "whoami", "context list", "context use", "context remove",
        "app apply", "app get", "app list", "app history", "app rollback", "app restart",
        "app stop", "app start", "app delete", "app logs", "app render", "app deploy",
        "status", "check", "key create", "key list", "key revoke", "key rotate", "chat",
        "complete", "embed", "transcribe", "completion",
    }  # fmt: skip
    assert wanted <= flat, wanted - flat


@pytest.mark.parametrize("verb", VERBS, ids=[" ".join(v) for v in VERBS])
def test_help_on_every_verb_has_an_example(verb, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*verb, "--help"])
    assert done.value.code == 0
    said = capsys.readouterr().out
    example = said.split("example:\n  ", 1)[1]
    assert f"servedeck {' '.join(verb)}" in example, said


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["app", "rollback", "x"])  # --to is required
    assert done.value.code == 2
    assert "--to" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url", ["ftp://host", "host:8000", "https://u:p@host", "http://example.com", "https://h/?q=1"]
)
def test_login_refuses_an_address_it_should_not_send_a_token_to(url, capsys, monkeypatch):
    monkeypatch.setenv("SERVEDECK_TOKEN", "sdp_x")
    assert cli.main(["login", url]) == 2
    assert capsys.readouterr().err.startswith(f"error: URL {url!r}")


def test_the_bash_script_completes_verbs_and_options(tmp_path):
    script = tmp_path / "servedeck.bash"
    script.write_text(completion.script(cli.build_parser(), "bash"))

    def complete(*words: str) -> list[str]:
        line = " ".join(["servedeck", *words])
        probe = (
            f"source {script}; COMP_WORDS=(servedeck {' '.join(words)}); "
            f"COMP_CWORD={len(words)}; COMP_LINE='{line}'; _servedeck; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert {"app", "key", "chat", "transcribe", "status"} <= set(complete(""))
    assert complete("ap") == ["app"]
    assert {"apply", "get", "logs", "rollback"} <= set(complete("app", ""))
    assert "--dry-run" in complete("app", "apply", "--d")
    assert complete("key", "r") == ["revoke", "rotate"]


def test_the_zsh_script_names_the_same_words():
    script = completion.script(cli.build_parser(), "zsh")
    assert script.startswith("#compdef servedeck") and "compdef _servedeck servedeck" in script
    assert (
        '"app apply") choices=(--console --dry-run --filename --help --org --output --timeout)'
        in script
    )


def test_the_config_file_is_private_and_a_readable_one_is_made_private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = config.Config(current="a", contexts={"a": config.Context(url="https://h", token="t")})
    path = config.save(cfg)
    assert path == tmp_path / "servedeck" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    assert config.load().contexts["a"].token == "t"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("not json")
    with pytest.raises(config.ConfigError, match="not a servedeck configuration"):
        config.load()


@pytest.mark.parametrize("variable", ["SERVEDECK_URL", "SERVEDECK_GATEWAY_URL"])
def test_an_address_from_the_environment_is_refused_plain_http_as_login_is(
    variable, capsys, monkeypatch
):
    """No request is made: the token (or API key) would cross the network unencrypted."""
    monkeypatch.setenv("SERVEDECK_URL", "https://console.example")
    monkeypatch.setenv("SERVEDECK_TOKEN", "sdp_x")
    monkeypatch.setenv("SERVEDECK_API_KEY", "sdk_x")
    monkeypatch.setenv(variable, "http://console.example:8000")
    verb = ["app", "list"] if variable == "SERVEDECK_URL" else ["embed", "m", "hello"]
    assert cli.main(verb) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: URL 'http://console.example:8000': plain http"), said
    assert "SERVEDECK_ALLOW_HTTP=1" in said
