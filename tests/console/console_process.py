"""The console as scripts/run.sh starts it (its last line: `python -m console.serve …`), as a
process of its own on a free loopback port, on the test's database (a file for SQLite, the
test database for PostgreSQL): what a test of the real server process uses."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connections

RUN_SCRIPT = Path(settings.BASE_DIR) / "scripts" / "run.sh"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_script_command(host: str, port: int) -> list[str]:
    """The run script's last command (the console's server), for this host and port."""
    line = RUN_SCRIPT.read_text().strip().splitlines()[-1]
    words = shlex.split(line.replace('"$HOST"', host).replace('"$PORT"', str(port)))
    assert words[0] == ".venv/bin/python", line
    return [sys.executable, *words[1:]]


def database_url() -> str:
    """The test database as a DATABASE_URL the console process reads."""
    db = connections["default"].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        assert db["NAME"] and ":memory:" not in str(db["NAME"]), "mark the test database_file"
        return f"sqlite:///{db['NAME']}"
    user = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class ConsoleProcess:
    """`python -m console.serve` on a free port; `stop()` ends it and returns what it wrote."""

    def __init__(self, folder: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "console.log"
        environ = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "SERVEDECK_VAR_DIR": str(folder),
            "SERVEDECK_RECONCILER_IN_PROCESS": "false",
            **env,
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                run_script_command("127.0.0.1", self.port),
                cwd=settings.BASE_DIR,
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = self.stop()
                raise AssertionError(f"the console did not start:\n{output[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.log.read_text(errors="replace")
