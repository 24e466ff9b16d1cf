"""The run script's CPU runtime step (scripts/setup_cpu_runtimes.sh, which scripts/run.sh runs
before it starts the console): SERVEDECK_CPU_RUNTIMES=0 skips it; installed runtimes are said
to be so, n of 3; a failed install names the runtime and the command that retries it, and the
step still succeeds so that the console starts. No network: nothing here reaches pip."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from jobs.backends.local import runtimes as rt

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "scripts" / "setup_cpu_runtimes.sh"
RUNTIMES = ("transformers", "infinity", "faster-whisper", "vllm")


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
        assert f"[{index}/{len(RUNTIMES)}] {name}: already installed in" in done.stdout, done.stdout
    assert "The first time this" in done.stdout and "CPU runtimes: ready" in done.stdout


def test_a_failed_install_says_which_and_how_to_retry_and_the_console_still_starts(tmp_path):
    done = run_step(tmp_path, PYTHON="/bin/false")  # no virtualenv can be made
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for index, name in enumerate(RUNTIMES, start=1):
        assert f"[{index}/{len(RUNTIMES)}] {name}: could not create the virtualenv" in out, out
    # The command every refusal names (absolute paths: it works from any folder).
    retry = rt.install_command(" ".join(RUNTIMES), tmp_path / "runtimes")
    assert retry.startswith(f"SERVEDECK_RUNTIMES_DIR={tmp_path / 'runtimes'} {ROOT}/scripts/")
    assert retry in out
    assert "The console starts anyway" in out


def test_the_run_script_runs_the_step_before_it_starts_the_console():
    script = (ROOT / "scripts" / "run.sh").read_text()
    assert script.index("scripts/setup_cpu_runtimes.sh") < script.index("console.serve")


RECORDING_PYTHON = """#!/bin/sh
# A virtualenv's python that records each pip call instead of reaching an index.
echo "$*" >> "$PIP_CALLS"
"""


def test_torch_comes_alone_from_pytorchs_cpu_index_and_the_rest_without_it(tmp_path):
    """PyPI has no `torch==X+cpu`: it is installed first, with no dependencies, from PyTorch's
    CPU index; the requirement file follows without that index (asked about every project, an
    index that does not answer would stall each one). A runtime without torch asks no extra
    index. Run from another folder, as a refusal's command may be."""
    calls = tmp_path / "pip-calls"
    for name in ("transformers", "faster-whisper"):
        python = tmp_path / "runtimes" / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(RECORDING_PYTHON)
        python.chmod(0o755)
    done = subprocess.run(
        [str(ROOT / "scripts" / "cpu_runtimes.sh"), "transformers", "faster-whisper"],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "SERVEDECK_RUNTIMES_DIR": str(tmp_path / "runtimes"),
            "PIP_CALLS": str(calls),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    torch = next(
        line
        for line in (ROOT / "requirements" / "cpu" / "transformers.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    assert torch.endswith("+cpu")
    pip = "-m pip install --disable-pip-version-check --progress-bar off"
    assert calls.read_text().splitlines() == [
        f"{pip} --quiet --upgrade pip",
        # torch's line with its hashes, alone in a file beside the virtualenv.
        f"{pip} --no-deps --extra-index-url https://download.pytorch.org/whl/cpu -r "
        f"{tmp_path / 'runtimes' / 'transformers' / 'torch-requirement.txt'}",
        f"{pip} -r requirements/cpu/transformers.txt",
        f"{pip} --quiet --upgrade pip",
        f"{pip} -r requirements/cpu/faster-whisper.txt",
    ]
    assert f"{torch} (torch's CPU build) comes from https://download.pytorch.org/whl/cpu" in (
        done.stdout
    )
    # Installed (the stamp is written): a second run calls pip for nothing.
    calls.unlink()
    again = subprocess.run(
        [str(ROOT / "scripts" / "cpu_runtimes.sh"), "transformers"],
        env={"PATH": os.environ["PATH"], "SERVEDECK_RUNTIMES_DIR": str(tmp_path / "runtimes")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "[1/1] transformers: already installed in" in again.stdout
    assert not calls.exists()
