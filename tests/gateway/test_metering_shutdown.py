"""Every counted request is written when the gateway process is stopped with SIGTERM, before the
next once-a-second flush: the meter's exit hook flushes (and SIGTERM runs exit hooks)."""

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("meter_child.py")
EXIT_CODES = {"plain": 128 + signal.SIGTERM, "own-handler": 0, "loop": 128 + signal.SIGTERM}


@pytest.mark.parametrize("mode", ["plain", "own-handler", "loop"])
def test_sigterm_flushes_every_recorded_request(tmp_path, mode):
    database = tmp_path / "usage.sqlite3"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env |= {"DATABASE_URL": f"sqlite:///{database}", "SERVEDECK_VAR_DIR": str(tmp_path)}
    count = 2500
    child = subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(count)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "ready", child.stderr.read()
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert code == EXIT_CODES[mode], child.stderr.read()
    with sqlite3.connect(database) as conn:
        requests, errors = conn.execute(
            "SELECT SUM(requests), SUM(errors_5xx) FROM jobs_usageminute"
        ).fetchone()
    assert (requests, errors) == (count, count // 4)
