"""The client installs on its own: a fresh virtualenv, `pip install` of the client package
alone (from the machine's package mirror, offline), and `servedeck --help` runs there without
anything of the console (no Django)."""

import shutil
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "client"


def test_the_client_installs_alone_in_a_fresh_virtualenv(tmp_path):
    source = tmp_path / "client"  # a copy: building never writes into the repository
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]

    helped = subprocess.run(
        [str(venv / "bin" / "servedeck"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0, helped.stderr
    assert "Exit codes: 0 done, 1 refused or failed, 2 usage, 3 cannot reach" in helped.stdout
    for verb in ("login", "app", "key", "chat", "transcribe", "status", "check"):
        assert verb in helped.stdout

    alone = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import servedeck.cli, openai, httpx, yaml, django"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "No module named 'django'" in alone.stderr, "the console came along"
