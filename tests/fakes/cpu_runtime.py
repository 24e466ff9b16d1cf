"""A machine without vLLM for the local backend's CPU runtimes: the `cpu_machine` fixture (the
real command, no vLLM on the PATH, a runtimes folder and a models folder of the test's own) and
a stand-in runtime installed where scripts/cpu_runtimes.sh would put one (`install_fake`).

The stand-in answers only /health, as transformers serve does before /v1/models, and prints
what it was given (a line "SEEN {json}"): argv, working folder, environment. Registered for every
test by tests/conftest.py (pytest_plugins).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobs.backends.local import runtimes as rt

FAKE_RUNTIME = """\
#!{python}
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
host = argv[argv.index("--host") + 1]
seen = {{"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}}
print("SEEN " + json.dumps(seen), flush=True)
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        print("POST " + self.path, flush=True)
        broken = any("broken" in a for a in argv)
        self.send_response(500 if broken else 200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{{"text": ""}}')
    def log_message(self, *args):
        pass
HTTPServer((host, port), Handler).serve_forever()
"""


@pytest.fixture
def cpu_machine(settings, tmp_path, monkeypatch):
    """No vLLM on the PATH, the real command (not the stand-in), a runtimes folder and a
    models folder of this test's own."""
    settings.SERVEDECK_LOCAL_COMMAND = ""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    runtimes = tmp_path / "runtimes"
    models = tmp_path / "models"
    models.mkdir()
    settings.SERVEDECK_RUNTIMES_DIR = str(runtimes)
    settings.SERVEDECK_MODELS_DIR = str(models)
    return runtimes, models


def install_fake(runtimes: Path, name: str = "transformers", version: str | None = None) -> None:
    """The stand-in where scripts/cpu_runtimes.sh would install runtime `name`, with its
    package's version on record (a .dist-info folder) when `version` is given."""
    spec = rt.CPU_RUNTIMES[name]
    if version is not None:
        site = runtimes / spec.folder / "lib" / "python3.11" / "site-packages"
        (site / f"{spec.package.replace('-', '_')}-{version}.dist-info").mkdir(parents=True)
    program = runtimes / spec.folder / "bin" / spec.program
    program.parent.mkdir(parents=True)
    program.write_text(FAKE_RUNTIME.format(python=sys.executable))
    program.chmod(0o755)
    (runtimes / spec.folder / rt.INSTALLED_STAMP).write_text("test\n")
