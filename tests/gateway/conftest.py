"""The gateway's fixtures: stand-in model servers, a live gateway, the live console (Daphne),
and the real machine the real-model tests run on."""

import os
import shutil
from pathlib import Path

import pytest

from tests.gateway.support import (
    IN_CI,
    MISSING,
    RUNTIMES_DIR,
    WHY_MISSING,
    StandIn,
    live_gateway,
)
from tests.live_server import console_process
from tests.packaged_models import NotReady, default_models_dir, prepare


@pytest.fixture(scope="session")
def alpha():
    server = StandIn("alpha")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def beta():
    server = StandIn("beta")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def speech_server():
    server = StandIn("speech", "--runtime", "parakeet")
    yield server
    server.stop()


@pytest.fixture
def gateway(transactional_db):
    live = live_gateway(read_timeout=2.0)
    yield live
    live.stop()


@pytest.fixture
def console_server(transactional_db, django_db_blocker):
    """Daphne serving `console.asgi:application` (settings.ASGI_APPLICATION) in a forked
    process, forked after the test's settings are in place (the local backend's stand-in);
    its base URL."""
    with console_process(django_db_blocker) as url:
        yield url


@pytest.fixture
def real_machine(settings):
    """The real command (no stand-in), the installed runtimes, the packaged models."""
    if MISSING:
        pytest.fail(f"CI runs the real-model test, but {WHY_MISSING}")
    if shutil.which("espeak-ng") is None:
        why = "espeak-ng speaks the WAV the test transcribes: apt-get install espeak-ng"
        pytest.fail(f"CI runs the real-model test, but {why}") if IN_CI else pytest.skip(why)
    try:
        models = prepare(runtimes_dir=RUNTIMES_DIR)
    except NotReady as exc:
        pytest.fail(f"the packaged models are not ready: {exc}")
    settings.SERVEDECK_LOCAL_COMMAND = ""
    settings.SERVEDECK_RUNTIMES_DIR = RUNTIMES_DIR
    settings.SERVEDECK_MODELS_DIR = default_models_dir().resolve()
    # vLLM's CPU build compiles a model once per version: its cache is kept beside the runtimes
    # (CI keeps both between runs), so the next run starts it warm.
    settings.SERVEDECK_VLLM_CACHE_DIR = os.environ.get("SERVEDECK_VLLM_CACHE_DIR") or (
        Path(RUNTIMES_DIR).resolve().parent / "vllm-cache"
    )
    settings.SERVEDECK_VLLM_CPU = "auto"
    return models
