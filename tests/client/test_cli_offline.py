"""What the client says without a console: `--help` with an example on every verb, usage
errors exit 2, shell completion for bash and zsh written from the parser, and the config file
made private."""

import argparse
import os
import shutil
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
        "app promote", "app abort",
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


ZSH = shutil.which("zsh")
needs_zsh = pytest.mark.skipif(
    ZSH is None, reason="zsh is not installed (scripts/test.sh installs Debian's zsh)"
)
# Inside zsh: compadd and _files (builtins of a completion widget) print what they are given.
STUBS = 'compadd() { print -l -- "${@:#--}" }; _files() { print "(files)" }'


def zsh_complete(setup: str, *words: str) -> list[str]:
    """What _servedeck offers in a real zsh for the line `servedeck WORDS` (the last word
    being completed), after `setup` loaded it."""
    quoted = " ".join(f"'{w}'" for w in words)
    probe = f"{setup}; {STUBS}; words=(servedeck {quoted}); CURRENT={len(words) + 1}; _servedeck"
    done = subprocess.run([ZSH, "-f", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@needs_zsh
def test_zsh_completes_on_the_first_tab_when_autoloaded_from_fpath(tmp_path):
    """Installed as a file in fpath, the file is _servedeck's body: its very first call must
    complete, not only define the function."""
    (tmp_path / "_servedeck").write_text(completion.script(cli.build_parser(), "zsh"))
    setup = f"fpath=({tmp_path} $fpath); autoload -Uz _servedeck"
    assert {"app", "key", "chat", "transcribe", "status"} <= set(zsh_complete(setup, ""))
    assert {"apply", "get", "logs", "rollback"} <= set(zsh_complete(setup, "app", ""))
    assert "--dry-run" in zsh_complete(setup, "app", "apply", "--d")
    assert zsh_complete(setup, "app", "apply", "-f", "") == ["(files)"]


@needs_zsh
def test_zsh_completes_when_sourced_after_compinit(tmp_path):
    script = tmp_path / "servedeck.zsh"
    script.write_text(completion.script(cli.build_parser(), "zsh"))
    setup = (
        f"autoload -Uz compinit && compinit -u -d {tmp_path / 'dump'}; source {script}; "
        '[[ $_comps[servedeck] == _servedeck ]] || { print "not registered" >&2; exit 1 }'
    )
    assert {"create", "list", "revoke", "rotate"} <= set(zsh_complete(setup, "key", ""))


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


def test_the_config_is_saved_private_without_os_fchmod(tmp_path, monkeypatch):
    """Windows before Python 3.13 has no os.fchmod: saving still works, and on POSIX the
    file is private all the same (mkstemp makes it 0600)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delattr(os, "fchmod")
    path = config.save(config.Config(current="a", contexts={"a": config.Context("https://h", "t")}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and config.load().current == "a"


def login_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for var in ("SERVEDECK_URL", "SERVEDECK_TOKEN", "SERVEDECK_CONSOLE"):
        monkeypatch.delenv(var, raising=False)
    contexts = {
        "acme@h": config.Context("https://h", "t1", "acme"),
        "globex@h": config.Context("https://h", "t2", "globex"),
    }
    config.save(config.Config(current="acme@h", contexts=contexts))


@pytest.mark.parametrize(
    ("argv", "env", "forgotten", "current"),
    [
        (["logout"], {}, "acme@h", ""),  # the current one; then none, as context remove
        (["logout"], {"SERVEDECK_CONSOLE": "globex@h"}, "globex@h", "acme@h"),
        (["logout", "--console", "globex@h"], {}, "globex@h", "acme@h"),
        (["logout", "--org", "globex"], {}, "globex@h", "acme@h"),
        (["context", "remove", "acme@h"], {}, "acme@h", ""),
    ],
)
def test_logout_forgets_the_context_a_verb_would_use(
    tmp_path, monkeypatch, capsys, argv, env, forgotten, current
):
    login_twice(tmp_path, monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 0
    saved = config.load()
    assert forgotten not in saved.contexts and len(saved.contexts) == 1
    assert saved.current == current
    said = capsys.readouterr().out
    assert ("No context is current now" in said) == (current == "")


def test_logout_with_the_environments_token_has_nothing_to_forget(tmp_path, monkeypatch, capsys):
    login_twice(tmp_path, monkeypatch)
    monkeypatch.setenv("SERVEDECK_URL", "https://h")
    monkeypatch.setenv("SERVEDECK_TOKEN", "t")
    assert cli.main(["logout"]) == 2
    assert "nothing is saved to forget" in capsys.readouterr().err
    assert len(config.load().contexts) == 2
