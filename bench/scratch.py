"""Set a bench up on a scratch SQLite database with Django configured, before anything imports
Django: the tests' stand-in model server instead of vLLM, nothing left behind afterwards."""

import atexit
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "tests" / "fakes" / "model_server.py"


def django_on_scratch(name: str, stand_in: bool = True) -> Path:
    """Configure and set up Django on a fresh database in a temporary folder; return it.
    `stand_in=False` leaves the local backend its real command (vLLM or the CPU runtimes)."""
    sys.path.insert(0, str(ROOT))
    work = Path(tempfile.mkdtemp(prefix=f"servedeck-{name}-bench-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["SERVEDECK_VAR_DIR"] = str(work)
    os.environ["SERVEDECK_KUBECONFIG_DIR"] = str(work)  # a bench's emulator writes one in it
    os.environ["ALLOWED_HOSTS"] = "testserver"
    if stand_in:
        os.environ["SERVEDECK_LOCAL_COMMAND"] = (
            f"{sys.executable} {STAND_IN} --port {{port}} --served-model-name {{name}} {{args}}"
        )
    else:
        os.environ.pop("SERVEDECK_LOCAL_COMMAND", None)
    os.environ["SERVEDECK_LOCAL_STATE_DIR"] = str(work / "local")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.pop("HF_TOKEN", None)
    # whitenoise looks for collected static files; a bench never serves any
    warnings.filterwarnings("ignore", "No directory at", UserWarning)
    import django

    django.setup()
    return work


def timed_gets(client, path: str, n: int, warm_up: int = 3, before_each=None) -> dict:
    """GET `path` n times after `warm_up` untimed ones: wall-clock median and p95 and the
    median CPU of this process, in ms, and the SQL queries of one more GET."""
    import statistics
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warm_up):
        assert client.get(path).status_code == 200
    times, cpu = [], []
    for _ in range(n):
        if before_each is not None:
            before_each()
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    times.sort()
    return {
        "median": statistics.median(times),
        "p95": times[min(len(times) - 1, round(0.95 * len(times)) - 1)],
        "cpu": statistics.median(cpu),
        "queries": len(queries),
    }
