"""The `servedeck` client as a user runs it: a subprocess against a live console (Daphne, the
local backend's stand-in model server, the gateway at /v1). It logs in, applies a manifest
(dry run, refusal, for real), watches it come up, manages a key, chats, embeds, transcribes,
reads logs and status, and says so clearly when the console is down. Where the console's own
`manage.py app|apikey` prints the same thing, the two outputs are compared whole."""

from __future__ import annotations

import json
import os
import re
import select
import stat
import subprocess
import sys
import time

import pytest
from django.conf import settings

from accesspolicies.models import Organization
from tests.gateway.support import free_port, make_app
from tests.helpers import SHORTEST, command_line, wait_for

pytestmark = pytest.mark.database_file  # the live server is another process: a database file

# Two refusals at once: a name the platform refuses, and a profile the organisation lacks.
REFUSED = SHORTEST.replace("name: bge-embed", "name: Bad_Name").replace(
    "profileName: local", "profileName: nowhere"
)
# The stand-in streams with a pause between chunks, so arrival one by one can be seen.
STREAMING = SHORTEST.replace(
    "      uri: hf://BAAI/bge-m3\n",
    "      uri: hf://BAAI/bge-m3\n      engine:\n        extraArgs: ['--stream-delay=0.1']\n",
)


@pytest.fixture(autouse=True)
def local_model_servers():
    """The module's console keeps its model servers from one test to the next (the project's
    per-test fixture stops them); the `live` fixture stops them at the module's end."""
    yield


def server_command(*args: str) -> tuple[str, str, int]:
    """`manage.py ARGS` as a shell runs it, in this process (on the live console's database):
    out, err, exit status; as acme's first admin, whom the client logged in as."""
    return command_line(*args, "--org", "acme")


def read_for(process, seconds: float, until: str | None = None) -> str:
    """What a running process printed within `seconds` (sooner once `until` shows)."""
    seen, deadline = b"", time.monotonic() + seconds
    fd = process.stdout.fileno()
    while time.monotonic() < deadline and not (until and until.encode() in seen):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            piece = os.read(fd, 65536)
            if not piece:
                break
            seen += piece
    return seen.decode()


def popen(cli, *args: str, **env: str) -> subprocess.Popen:
    """`servedeck ARGS` left running, its output read with read_for."""
    return subprocess.Popen(
        [sys.executable, "-m", "servedeck", *args],
        env=cli.env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def ok(result) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def cli(live):
    """Logged in as ada (an admin of acme) with SERVEDECK_TOKEN, as a laptop would be."""
    result = live.run("login", live.url, SERVEDECK_TOKEN=live.admin_token)
    assert result.returncode == 0, result.stderr
    return live


@pytest.fixture(scope="module")
def deployed(cli, tmp_path_factory):
    manifest = tmp_path_factory.mktemp("manifests") / "model.yaml"
    manifest.write_text(STREAMING)
    with cli.reconciling():
        applied = cli.run("app", "apply", "-f", str(manifest))
        assert ok(applied).strip() == "application/bge-embed created (revision 1)"
        came_up = cli.run(
            "status", "bge-embed", "--until", "Running", "--wait", "60", "--interval", "0.3"
        )
    assert "application/bge-embed: Running" in ok(came_up), came_up.stdout
    cli.make_speech_app()
    return manifest


@pytest.fixture(scope="module")
def api_key(cli, deployed):
    made = json.loads(ok(cli.run("key", "create", "laptop-bot", "--json")))
    assert made["name"] == "laptop-bot" and made["key"].startswith("sdk_")
    # The gateway reloads its keys once a second: wait until this one is accepted.
    deadline = time.monotonic() + 10
    while True:
        tried = cli.run("embed", "bge-embed", "ready?", SERVEDECK_API_KEY=made["key"])
        if tried.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert tried.returncode == 0, tried.stderr
    return made["key"]


def test_login_keeps_the_token_private_and_whoami_says_who(cli):
    path = cli.home / "config" / "servedeck" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    saved = json.loads(path.read_text())
    name = saved["current"]
    assert name.startswith("acme@127.0.0.1:")
    assert saved["contexts"][name]["token"] == cli.admin_token

    me = json.loads(ok(cli.run("whoami", "--json")))
    assert (me["user"], me["organization"], me["role"]) == ("ada", "acme", "admin")
    assert ok(cli.run("whoami")).startswith("ada in acme (Acme), role admin, at http://127.0.0.1:")

    # A second login, as the viewer, under its own context name; --console picks it.
    viewer = cli.run("login", cli.url, "--name", "vera", input=cli.viewer_token + "\n")
    assert "as vera in acme (viewer)" in ok(viewer)
    assert json.loads(ok(cli.run("whoami", "--json", "--console", "vera")))["user"] == "vera"
    assert "vera" in ok(cli.run("context", "list"))
    ok(cli.run("context", "use", name))
    # --org picks among the logins to this console; an organisation without one is refused.
    assert json.loads(ok(cli.run("whoami", "--json", "--org", "acme")))["organization"] == "acme"
    elsewhere = cli.run("whoami", "--org", "globex")
    assert elsewhere.returncode == 2 and "--org globex: no login to" in elsewhere.stderr
    # ada logs in to globex too: two logins to one console, --org chooses which acts.
    wrong_org = cli.run("login", cli.url, "--org", "acme", SERVEDECK_TOKEN=cli.other_org_token)
    assert wrong_org.returncode == 1 and "this token is ada's in globex" in wrong_org.stderr
    ok(cli.run("login", cli.url, "--org", "globex", SERVEDECK_TOKEN=cli.other_org_token))
    ok(cli.run("context", "use", name))
    assert ok(cli.run("whoami", "--org", "globex")).startswith("ada in globex (Globex), role ")
    assert ok(cli.run("whoami", "--org", "acme")).startswith("ada in acme (Acme), role ")
    assert ok(cli.run("whoami")).startswith("ada in acme (Acme)")  # the current one
    make_app(Organization.objects.get(slug="globex"), "globex-only", "http://127.0.0.1:9")
    listed = {
        org: [a["name"] for a in json.loads(ok(cli.run("app", "list", "--json", "--org", org)))]
        for org in ("acme", "globex")
    }
    assert listed["globex"] == ["globex-only"] and "globex-only" not in listed["acme"], listed
    # Forgetting globex's login leaves acme's current.
    ok(cli.run("logout", "--org", "globex"))
    assert cli.run("whoami", "--org", "globex").returncode == 2
    assert json.loads(path.read_text())["current"] == name

    wrong = cli.run("login", cli.url, "--name", "nobody", SERVEDECK_TOKEN="sdp_not-a-token")
    assert wrong.returncode == 1
    assert "Not authenticated: send a personal access token" in wrong.stderr
    assert "nobody" not in json.loads(path.read_text())["contexts"]


def test_apply_dry_run_and_refusal_read_as_the_console_says_them(cli, tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(SHORTEST.replace("bge-embed", "dry-one"))
    bad.write_text(REFUSED)

    dry = cli.run("app", "apply", "-f", str(good), "--dry-run")
    server_out, _, _ = server_command("app", "apply", "-f", str(good), "--dry-run")
    assert ok(dry).startswith("dry run: application/dry-one would be: create; nothing saved.")
    assert dry.stdout == server_out  # one presenter

    as_json = json.loads(ok(cli.run("app", "apply", "-f", str(good), "--dry-run", "-o", "json")))
    assert as_json["ok"] is True and as_json["manifest"]["spec"]["name"] == "dry-one"
    flagged = ok(cli.run("app", "apply", "-f", str(good), "--dry-run", "--json"))
    assert json.loads(flagged).keys() == as_json.keys()  # --json is -o json, as on every verb
    assert "dry-one" not in ok(cli.run("app", "list")), "a dry run saved nothing"

    refused = cli.run("app", "apply", "-f", str(bad))
    _, server_err, server_code = server_command("app", "apply", "-f", str(bad))
    assert refused.returncode == 1 == server_code
    problems = [line for line in refused.stderr.splitlines() if line.startswith("error: spec.")]
    assert len(problems) >= 2, refused.stderr  # every problem, not only the first
    assert any("spec.name" in line for line in problems), problems
    assert any("spec.profileName" in line for line in problems), problems
    assert refused.stderr.splitlines()[-1] == f"error: refused: {len(problems)} problems"
    assert refused.stderr == server_err  # every line, the same words

    # A viewer may not even dry-run: the console's words, exit 1.
    viewer = cli.run("app", "apply", "-f", str(good), "--dry-run", "--console", "vera")
    assert viewer.returncode == 1 and viewer.stderr.startswith("error: "), viewer.stderr


def test_get_list_history_with_every_default_match_the_console(cli, deployed):
    got = ok(cli.run("app", "get", "bge-embed"))
    server_out, _, _ = server_command("app", "get", "bge-embed")
    assert got == server_out
    spec = json.loads(ok(cli.run("app", "get", "bge-embed", "--json")))["spec"]
    assert spec["name"] == "bge-embed" and len(spec) > 4, spec  # the defaults filled in
    assert spec["source"]["model"]["format"] == "vLLM"

    assert ok(cli.run("app", "list")) == server_command("app", "list")[0]
    assert (
        ok(cli.run("app", "history", "bge-embed"))
        == server_command("app", "history", "bge-embed")[0]
    )
    assert [a["name"] for a in json.loads(ok(cli.run("app", "list", "--json")))] == [
        "bge-embed",
        "speech",
    ]
    missing = cli.run("app", "get", "nothing-here")
    assert missing.returncode == 1 and "nothing-here" in missing.stderr, missing.stderr


def test_render_prints_the_objects_and_says_what_local_does(cli, deployed):
    rendered = cli.run("app", "render", "-f", str(deployed))
    server_out, server_err, _ = server_command("app", "render", "-f", str(deployed))
    assert ok(rendered) == server_out
    assert "kind: InferenceService" in rendered.stdout
    assert rendered.stderr.strip() == server_err.strip()
    answer = json.loads(ok(cli.run("app", "render", "-f", str(deployed), "--json")))
    assert answer["objects"][0]["kind"] == "InferenceService"
    assert answer["note"] == server_err.splitlines()[-1]
    assert [f"warning: {w['path']}: {w['message']}" for w in answer["warnings"]] == (
        server_err.splitlines()[:-1]
    )


def test_key_create_list_revoke_and_the_secret_once(cli, deployed):
    made = cli.run("key", "create", "throwaway")
    said, secret = ok(made).splitlines()
    assert said == "apikey/throwaway created; its key:" and secret.startswith("sdk_")
    assert "shown once" in made.stderr
    listed = ok(cli.run("key", "list"))
    assert "throwaway" in listed and secret not in listed
    assert listed == server_command("apikey", "list")[0]

    bad = cli.run("key", "create", "too-slow", "--rpm", "0")
    _, server_err, _ = server_command("apikey", "create", "too-slow", "--rpm", "0")
    assert bad.returncode == 1 and bad.stderr.startswith("error: --rpm: "), bad.stderr
    assert bad.stderr == server_err

    assert ok(cli.run("key", "revoke", "throwaway")).strip() == "apikey/throwaway revoked"
    again = ok(cli.run("key", "revoke", "throwaway")).strip()
    assert again == "apikey/throwaway was revoked already"
    # A viewer is no admin: refused in the console's words.
    viewer = cli.run("key", "list", "--console", "vera")
    assert viewer.returncode == 1 and "API keys" in viewer.stderr, viewer.stderr


def test_chat_prints_each_chunk_as_it_arrives(cli, api_key):
    process = subprocess.Popen(
        [sys.executable, "-m", "servedeck", "chat", "bge-embed", "Say", "three", "words"],
        env=cli.env(SERVEDECK_API_KEY=api_key),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pieces, running_when_read = [], []
    fd = process.stdout.fileno()
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 30)
            assert ready, "no output for 30 s"
            piece = os.read(fd, 4096)
            if not piece:
                break
            pieces.append(piece)
            running_when_read.append(process.poll() is None)
    finally:
        process.wait(timeout=30)
    assert process.returncode == 0, process.stderr.read()
    # The stand-in pauses between chunks: the first words were on the terminal while the
    # answer was still coming, in more than one read.
    assert len(pieces) >= 2 and running_when_read[0], pieces
    assert b"".join(pieces).strip()

    # A prompt may steer the model into writing escape sequences: shown, never obeyed.
    steered = ok(cli.run("chat", "bge-embed", "\x1b]0;owned\x07", SERVEDECK_API_KEY=api_key))
    assert steered.strip().endswith("You said: \\x1b]0;owned\\x07"), steered
    assert "\x1b" not in steered

    # Without a prompt: a session, each line a turn, the history sent along.
    # The stand-in answers the last message and says how many came: the second turn carries
    # the first question and its answer.
    session = cli.run("chat", "bge-embed", input="Hello\nAnd again\n\n", SERVEDECK_API_KEY=api_key)
    assert ok(session).splitlines() == [
        "Hello from bge-embed. You said: Hello",
        "Hello from bge-embed. You said: And again (3 messages)",
    ]
    briefed = cli.run(
        "chat", "bge-embed", "--system", "Be brief.", input="One\nTwo\n", SERVEDECK_API_KEY=api_key
    )
    assert ok(briefed).splitlines() == [
        "Hello from bge-embed. You said: One (2 messages)",
        "Hello from bge-embed. You said: Two (4 messages)",
    ]


def test_embed_and_complete(cli, api_key):
    table = ok(cli.run("embed", "bge-embed", "eating bread", "a plane", SERVEDECK_API_KEY=api_key))
    rows = table.splitlines()
    assert rows[0].split() == ["INDEX", "DIMENSIONS", "FIRST", "VALUES", "TEXT"] and len(rows) == 3
    vectors = json.loads(
        ok(cli.run("embed", "bge-embed", "one", "two", "--json", SERVEDECK_API_KEY=api_key))
    )
    assert [v["text"] for v in vectors] == ["one", "two"] and len(vectors[0]["embedding"]) > 0
    assert ok(cli.run("complete", "bge-embed", "Once", "--key", api_key)).strip()

    no_key = cli.run("embed", "bge-embed", "x")
    assert no_key.returncode == 2 and "SERVEDECK_API_KEY" in no_key.stderr
    bad_key = cli.run("embed", "bge-embed", "x", "--key", "sdk_wrong")
    assert bad_key.returncode == 1 and "API key" in bad_key.stderr, bad_key.stderr


def test_transcribe_in_openai_terms(cli, api_key, tmp_path):
    # The parakeet stand-in "hears" UTF-8 text; the gateway speaks OpenAI's terms to us.
    audio = tmp_path / "talk.wav"
    audio.write_text("hello from the terminal client")
    text = cli.run("transcribe", "speech", str(audio), "--language", "en", "--key", api_key)
    assert ok(text).strip() == "hello from the terminal client"
    srt = ok(cli.run("transcribe", "speech", str(audio), "--format", "srt", "--key", api_key))
    assert "-->" in srt and "hello from the terminal" in srt
    vtt = ok(cli.run("transcribe", "speech", str(audio), "--format", "vtt", "--key", api_key))
    assert vtt.startswith("WEBVTT") and "-->" in vtt and "hello from the terminal" in vtt, vtt
    verbose = json.loads(
        ok(
            cli.run(
                "transcribe", "speech", str(audio), "--format", "verbose_json", "--key", api_key
            )
        )
    )
    assert verbose["text"] == "hello from the terminal client" and verbose["segments"]
    hostile = tmp_path / "hostile.wav"
    hostile.write_text("\x1b[2Jcleared\x1b]0;owned\x07")
    heard = ok(cli.run("transcribe", "speech", str(hostile), "--key", api_key))
    assert heard == "\\x1b[2Jcleared\\x1b]0;owned\\x07\n", heard
    missing = cli.run("transcribe", "speech", str(tmp_path / "none.wav"), "--key", api_key)
    assert missing.returncode == 1 and "none.wav: cannot read it" in missing.stderr


def test_status_logs_and_operations(cli, api_key):
    status = ok(cli.run("status", "bge-embed")).splitlines()
    assert status[0] == "application/bge-embed: Running"
    assert "  health:       healthy" in status, status  # the health API's verdict
    assert any(line.startswith("  success rate: ") for line in status), status
    assert any(line.startswith("  latency:      p50 ") for line in status), status
    found = json.loads(ok(cli.run("status", "bge-embed", "--json")))
    assert found["phase"] == "Running" and found["health"]["status"] == "healthy", found

    logs = ok(cli.run("app", "logs", "bge-embed", "--lines", "50"))
    assert "POST /v1/embeddings" in logs, logs
    assert len(json.loads(ok(cli.run("app", "logs", "bge-embed", "--json")))["lines"]) > 0

    # A line a caller steered into the log reads the same, made safe, on both sides.
    log = settings.SERVEDECK_LOCAL_STATE_DIR / "acme" / "bge-embed" / "replica-0.log"
    with log.open("a") as handle:
        handle.write("caller said \x1b]0;owned\x07\tthen \x1b[2J\n")
    shown = "caller said \\x1b]0;owned\\x07\tthen \\x1b[2J"
    for said in (
        ok(cli.run("app", "logs", "bge-embed", "--lines", "20")),
        server_command("app", "logs", "bge-embed", "--lines", "20")[0],
    ):  # the console asks the server whether it answers, which adds lines after
        assert [line for line in said.splitlines() if "caller said" in line] == [shown], said

    # -f: each line written while it follows, once, however often the same text repeats:
    # more identical lines than one answer holds (1000), then a few more of them.
    follow = popen(cli, "app", "logs", "bge-embed", "-f", "--lines", "1", "--interval", "0.2")
    try:
        read_for(follow, 1.5)  # what it printed first
        with log.open("a") as handle:
            handle.write("the same line\n" * 1200)
        seen = read_for(follow, 10, until="the same line\n" * 1200)
        with log.open("a") as handle:
            handle.write("the same line\nthe same line\nat last\n")
        seen += read_for(follow, 10, until="at last\n")
        ok(cli.run("embed", "bge-embed", "followed", SERVEDECK_API_KEY=api_key))
        seen += read_for(follow, 10, until="POST /v1/embeddings")
        seen += read_for(follow, 1)  # and nothing more of what it printed already
        assert seen.count("the same line\n") == 1202 and seen.count("at last\n") == 1
        assert "POST /v1/embeddings" in seen and follow.poll() is None, "it follows on"
    finally:
        follow.terminate()
        follow.wait(timeout=10)

    # -f --json: JSON lines, one answer each, with the cursor it goes on from.
    follow = popen(cli, "app", "logs", "bge-embed", "-f", "--json", "--interval", "0.2")
    try:
        first = read_for(follow, 10, until="\n")
        with log.open("a") as handle:
            handle.write("json follow\n")
        more = read_for(follow, 10, until="json follow")
    finally:
        follow.terminate()
        follow.wait(timeout=10)
    answers = [json.loads(line) for line in (first + more).splitlines()]
    assert all(a["name"] == "bge-embed" and a["cursor"] for a in answers), answers
    assert "json follow" in answers[-1]["lines"], answers

    restarted = ok(cli.run("app", "restart", "bge-embed"))
    assert restarted.startswith("application/bge-embed restart: "), restarted
    stopped = ok(cli.run("app", "stop", "bge-embed"))
    assert stopped.startswith("application/bge-embed stop: "), stopped

    # --watch follows it live: the state it is in, then the next one, and --count ends it.
    watch = popen(cli, "status", "bge-embed", "--watch", "--count", "2", "--interval", "0.3")
    try:
        before = read_for(watch, 10, until="replicas:")
        assert before.startswith("application/bge-embed: Stopped"), before
        started = ok(cli.run("app", "start", "bge-embed"))
        assert started.startswith("application/bge-embed start: "), started
        rest, _ = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0
    blocks = (before + rest.decode()).split("\n\n")
    assert len(blocks) == 2 and not blocks[1].startswith("application/bge-embed: Stopped")


def test_a_console_that_is_down_exits_3_in_clear_words(cli):
    down = f"http://127.0.0.1:{free_port()}"
    result = cli.run("app", "list", SERVEDECK_URL=down, SERVEDECK_TOKEN=cli.admin_token)
    assert result.returncode == 3, result
    assert f"cannot reach the console at {down}" in result.stderr
    assert "that the console is running" in result.stderr
    login = cli.run("login", down, SERVEDECK_TOKEN="sdp_x")
    assert login.returncode == 3 and "cannot reach the console" in login.stderr
    # Usage: a bad option exits 2; not logged in exits 2 with what to do.
    assert cli.run("app", "get").returncode == 2
    empty = cli.run("app", "list", XDG_CONFIG_HOME=str(cli.home / "nowhere"))
    assert empty.returncode == 2 and "servedeck login URL" in empty.stderr


def test_check_model_reads_as_checkmodel_does(cli):
    checked = cli.run("check", "hf://BAAI/bge-m3", "--profile", "local", "--context", "4096")
    server_out, _, server_code = server_command(
        "checkmodel", "hf://BAAI/bge-m3", "--profile", "local", "--context", "4096"
    )
    assert checked.returncode == server_code
    assert checked.stdout == server_out and "runtime:" in checked.stdout, checked.stdout
    answer = json.loads(ok(cli.run("check", "hf://BAAI/bge-m3", "--json")))
    assert answer["profile"] == "local" and "verdict" in answer
    cannot = cli.run("check", "hf://acme/colossus-12t", "--profile", "local")
    assert cannot.returncode == 1 and cannot.stderr.strip() == "error: cannot serve"


def test_rollback_and_deploy_read_as_the_console_says_them(cli, tmp_path):
    manual = SHORTEST.replace("name: bge-embed", "name: roll").replace(
        "profileName: local", "profileName: local\n  syncType: Manual"
    )
    first, bigger = tmp_path / "roll.yaml", tmp_path / "bigger.yaml"
    first.write_text(manual)
    bigger.write_text(manual + "      resources:\n        memory: 6Gi\n")
    assert (
        ok(cli.run("app", "apply", "-f", str(first))) == "application/roll created (revision 1)\n"
    )
    ok(cli.run("app", "apply", "-f", str(bigger)))
    rolled = ok(cli.run("app", "rollback", "roll", "--to", "1"))
    assert rolled == "application/roll rolled back to revision 1 (revision 3)\n"
    history = ok(cli.run("app", "history", "roll"))
    assert history == server_command("app", "history", "roll")[0]
    assert [line.split()[0] for line in history.splitlines()[1:]] == ["3", "2", "1"]
    assert history.splitlines()[1].endswith("rollback to 1"), history
    missing = cli.run("app", "rollback", "roll", "--to", "9")
    assert (missing.returncode, missing.stderr) == server_command(
        "app", "rollback", "roll", "--to", "9"
    )[2:0:-1]
    assert missing.stderr.startswith("error: revision: roll has no revision 9;"), missing.stderr

    deployed = ok(cli.run("app", "deploy", "roll")).splitlines()
    assert re.fullmatch(r"application/roll revision 3: \w+", deployed[0]), deployed
    assert ok(cli.run("app", "delete", "roll")) == "application/roll deleted\n"


def test_key_rotate_prints_the_new_secret_once(cli, deployed):
    ok(cli.run("key", "create", "rotating"))
    rotated = cli.run("key", "rotate", "rotating", "--grace", "5")
    said, secret = ok(rotated).splitlines()
    assert re.fullmatch(
        r"apikey/rotating rotated; the old secret works until "
        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\. The new key:",
        said,
    ), said
    assert secret.startswith("sdk_") and "shown once" in rotated.stderr
    server_out, server_err, _ = server_command("apikey", "rotate", "rotating", "--grace", "5")
    assert server_out.splitlines()[0].split(" until ")[0] == said.split(" until ")[0]
    assert server_err == rotated.stderr
    as_json = json.loads(ok(cli.run("key", "rotate", "rotating", "--json")))
    assert as_json["key"].startswith("sdk_") and as_json["previousExpiresAt"], as_json
    assert as_json["state"] == "rotating" and "rotating" in ok(cli.run("key", "list"))
    refused = cli.run("key", "rotate", "rotating", "--grace", "-1")
    _, server_err, _ = server_command("apikey", "rotate", "rotating", "--grace", "-1")
    assert refused.returncode == 1 and refused.stderr == server_err, refused.stderr


def test_done_when_from_a_clean_install(cli, deployed, fresh_install, tmp_path):
    """The issue's "Done when", run by the `servedeck` executable of a fresh virtualenv that
    holds the client package alone, with a config of its own: log in, apply a manifest (a
    refusal first, in the console's words), watch it come up, create a key, chat with the
    model, transcribe a file."""
    laptop = tmp_path / "laptop"
    env = {"HOME": str(laptop), "XDG_CONFIG_HOME": str(laptop / "config")}

    def run(*args: str, **extra: str):
        return cli.run(*args, program=(str(fresh_install / "servedeck"),), **env, **extra)

    assert " as ada in acme (admin); " in ok(run("login", cli.url, SERVEDECK_TOKEN=cli.admin_token))
    bad, good = tmp_path / "bad.yaml", tmp_path / "laptop.yaml"
    bad.write_text(REFUSED)
    good.write_text(SHORTEST.replace("name: bge-embed", "name: laptop"))
    refused = run("app", "apply", "-f", str(bad))
    _, server_err, server_code = server_command("app", "apply", "-f", str(bad))
    assert (refused.returncode, refused.stderr) == (server_code, server_err) == (1, server_err)
    try:
        with cli.reconciling():
            applied = ok(run("app", "apply", "-f", str(good)))
            assert applied == "application/laptop created (revision 1)\n"
            came_up = run(
                "status", "laptop", "--until", "Running", "--wait", "60", "--interval", "0.3"
            )
        assert "application/laptop: Running" in ok(came_up), came_up.stdout
        made = json.loads(ok(run("key", "create", "from-laptop", "--json")))
        # The gateway reloads its keys once a second: chat once it takes this one.
        chats = []

        def chatted():
            chats.append(run("chat", "laptop", "Hello", SERVEDECK_API_KEY=made["key"]))
            return chats[-1].returncode == 0

        wait_for(chatted, "the gateway never took the new key", timeout=10, every=0.2)
        assert chats[-1].stdout == "Hello from laptop. You said: Hello\n", chats[-1].stderr
        audio = tmp_path / "talk.wav"
        audio.write_text("hello from a clean install")
        heard = run("transcribe", "speech", str(audio), SERVEDECK_API_KEY=made["key"])
        assert ok(heard) == "hello from a clean install\n"
    finally:
        cli.run("app", "delete", "laptop")


def test_benchmark_runs_on_the_console_and_prints_its_levels(cli, deployed):
    """`servedeck app benchmark`: the console runs it on a worker thread through its gateway
    against the running model server; the client reads it until it ends."""
    said = ok(cli.run("app", "benchmark", "bge-embed")).splitlines()
    assert said[0] == "application/bge-embed revision 1 benchmark: Succeeded", said
    assert said[1].startswith("  prompts: "), said
    rows = [line.split()[:3] for line in said if line[:1].isdigit()]
    assert rows == [["1", "16", "0"], ["4", "48", "0"], ["16", "128", "0"]], said
    again = json.loads(ok(cli.run("app", "benchmark", "bge-embed", "--json")))
    assert again["state"] == "Succeeded" and again["task"] == "embedding", again
    assert [level["requests"] for level in again["levels"]] == [16, 48, 128]
    listed = json.loads(ok(cli.run("app", "history", "bge-embed", "--json")))
    assert listed[0]["number"] == 1  # a benchmark makes no revision


def test_delete_reads_as_the_console_says_it(cli, deployed):
    gone = ok(cli.run("app", "delete", "bge-embed"))
    assert gone.strip() == "application/bge-embed deleted"
    assert "bge-embed" not in ok(cli.run("app", "list"))
    again = cli.run("app", "delete", "bge-embed")
    server_out, server_err, server_code = server_command("app", "delete", "bge-embed")
    assert again.returncode == 1 == server_code
    assert again.stderr == server_err and again.stderr.startswith("error: ")
