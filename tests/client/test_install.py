"""The client installs on its own: a fresh virtualenv, `pip install` of the client package
alone (from the machine's package index and cache), and `servedeck --help` runs there without
anything of the console (no Django). test_client_live.py runs the same install against a live
console."""

import subprocess


def test_the_client_installs_alone_in_a_fresh_virtualenv(fresh_install):
    helped = subprocess.run(
        [str(fresh_install / "servedeck"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0, helped.stderr
    assert "Exit codes: 0 done, 1 refused or failed, 2 usage, 3 cannot reach" in helped.stdout
    for verb in ("login", "app", "key", "chat", "transcribe", "status", "check"):
        assert verb in helped.stdout

    alone = subprocess.run(
        [str(fresh_install / "python"), "-c", "import servedeck.cli, openai, httpx, yaml, django"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "No module named 'django'" in alone.stderr, "the console came along"
