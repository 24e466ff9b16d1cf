"""Where the reconciler runs: scripts/run.sh starts `manage.py reconcile --unless-in-process`
beside the console, which asks the console's own settings (SERVEDECK_RECONCILER_IN_PROCESS, read
as every boolean setting is) and exits at once when the console runs the reconciler itself: one
reconciler whatever the variable's spelling, never two, never none."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[3]


def reconcile(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SERVEDECK_VAR_DIR": str(tmp_path / "var"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "reconcile", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("value", ["1", "yes", "on", "True"])
def test_none_is_started_beside_a_console_that_runs_it_with_redis_too(tmp_path, value):
    """REDIS_URL set and the variable on in any spelling the settings take: the console runs
    the reconciler, so the one run.sh starts beside it stops at once."""
    done = reconcile(
        tmp_path,
        "--unless-in-process",
        REDIS_URL="redis://127.0.0.1:9/0",  # never reached: the command only reads settings
        SERVEDECK_RECONCILER_IN_PROCESS=value,
    )
    assert done.returncode == 0, done.stderr
    assert "none is started here" in done.stdout


@pytest.mark.django_db(transaction=True)  # a pass closes old connections, as between passes
def test_one_is_started_when_the_console_runs_none(settings):
    """Without Redis but the variable off (0, false, no, off): the console runs none, so this
    one runs (here one pass)."""
    settings.SERVEDECK_RECONCILER_IN_PROCESS = False
    out = StringIO()
    call_command("reconcile", "--unless-in-process", "--once", stdout=out)
    assert out.getvalue() == "0 application(s) changed\n"


@pytest.mark.parametrize("value", ["0", "no"])
def test_the_settings_read_the_variable_as_off(tmp_path, value):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from django.conf import settings; print(settings.SERVEDECK_RECONCILER_IN_PROCESS)",
        ],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "SERVEDECK_VAR_DIR": str(tmp_path / "var"),
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "SERVEDECK_RECONCILER_IN_PROCESS": value,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "False", done.stderr


def test_the_run_script_leaves_the_decision_to_the_settings():
    script = (ROOT / "scripts" / "run.sh").read_text()
    assert "manage.py reconcile --unless-in-process &" in script
    assert "SERVEDECK_RECONCILER_IN_PROCESS:-" not in script  # no comparison of its own
    assert script.index("reconcile --unless-in-process") < script.index("console.serve")
