"""The run script's CPU runtime step (scripts/setup_cpu_runtimes.sh, which scripts/run.sh runs
before it starts the console): SERVEDECK_CPU_RUNTIMES=0 skips it; installed runtimes are said
to be so, n of 3; a failed install names the runtime and the command that retries it, and the
step still succeeds so that the console starts. No network: nothing here reaches pip."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "scripts" / "setup_cpu_runtimes.sh"
RUNTIMES = ("transformers", "infinity", "faster-whisper")


def run_step(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SERVEDECK_RUNTIMES_DIR": str(tmp_path / "runtimes"),
        **env,
    }
    return subprocess.run(
        ["bash", str(STEP)], env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_switch_skips_the_install(tmp_path):
    done = run_step(tmp_path, SERVEDECK_CPU_RUNTIMES="0", PYTHON="/bin/false")
    assert done.returncode == 0, done.stderr
    assert "CPU runtimes: skipped (SERVEDECK_CPU_RUNTIMES=0)" in done.stdout
    assert not (tmp_path / "runtimes").exists()


def test_installed_runtimes_are_said_to_be_so_one_by_one(tmp_path):
    for name in RUNTIMES:
        venv = tmp_path / "runtimes" / name
        (venv / "bin").mkdir(parents=True)
        python = venv / "bin" / "python"
        python.write_text("#!/bin/sh\nexit 0\n")
        python.chmod(0o755)
        wanted = (ROOT / "requirements" / "cpu" / f"{name}.txt").read_bytes()
        (venv / ".requirements.sha256").write_text(hashlib.sha256(wanted).hexdigest() + "\n")
    done = run_step(tmp_path, PYTHON="/bin/false")
    assert done.returncode == 0, done.stderr
    for index, name in enumerate(RUNTIMES, start=1):
        assert f"[{index}/3] {name}: already installed in" in done.stdout, done.stdout
    assert "The first time this" in done.stdout and "CPU runtimes: ready" in done.stdout


def test_a_failed_install_says_which_and_how_to_retry_and_the_console_still_starts(tmp_path):
    done = run_step(tmp_path, PYTHON="/bin/false")  # no virtualenv can be made
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for index, name in enumerate(RUNTIMES, start=1):
        assert f"[{index}/3] {name}: could not create the virtualenv" in out, out
    retry = f"SERVEDECK_RUNTIMES_DIR={tmp_path / 'runtimes'} scripts/cpu_runtimes.sh " + " ".join(
        RUNTIMES
    )
    assert retry in out
    assert "The console starts anyway" in out


def test_the_run_script_runs_the_step_before_it_starts_the_console():
    script = (ROOT / "scripts" / "run.sh").read_text()
    assert script.index("scripts/setup_cpu_runtimes.sh") < script.index("console.serve")
