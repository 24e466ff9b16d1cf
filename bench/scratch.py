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
