"""What the gateway's tests share: stand-in model servers, applications pointed at them, keys,
a live gateway under uvicorn in a thread, a meter that keeps what it was given, and what the
real-model tests need installed."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from accesspolicies.models import APIKey
from accesspolicies.secrets import API_KEY
from jobs.backends.local import runtimes as rt
from jobs.backends.local import vllm_cpu as vc
from jobs.gateway.app import Gateway
from jobs.gateway.metering import Meter, RequestRecord
from jobs.gateway.proxy import Timeouts
from jobs.gateway.snapshot import SnapshotKeeper
from jobs.models import Application, Profile

STAND_IN = Path(__file__).parent.parent / "fakes" / "model_server.py"

# The real-model tests' CPU runtimes (the real_machine fixture): skipped without them on a
# developer's machine, failed in CI (CI=true), where scripts/test.sh installs them.
RUNTIMES_DIR = rt.configured_runtimes_dir()
# Chat runs on vLLM's CPU build wherever this CPU runs it (the install script installs it there).
CHAT_RUNTIME = "vllm-cpu" if vc.cpu_unfit(platform.machine(), vc.cpu_flags()) is None else None
# Embeddings too (its pooling runner; all-MiniLM-L6-v2 is a BertModel), infinity-emb elsewhere.
EMBEDDING_RUNTIME = CHAT_RUNTIME or "infinity"
NEEDED = ("transformers", "infinity", "faster-whisper", *([CHAT_RUNTIME] if CHAT_RUNTIME else []))
MISSING = sorted(set(NEEDED) - rt.installed_runtimes(RUNTIMES_DIR))
_FOLDERS = " ".join(rt.CPU_RUNTIMES[name].folder for name in MISSING)
WHY_MISSING = (
    f"the CPU runtimes {', '.join(MISSING)} are not installed in {RUNTIMES_DIR}; run "
    f"{rt.install_command(_FOLDERS, RUNTIMES_DIR)} (scripts/test.sh does it)"
)
IN_CI = os.environ.get("CI", "").lower() == "true"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandIn:
    """A stand-in model server process serving one model."""

    def __init__(self, name: str, *extra: str) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(STAND_IN), "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--served-model-name", name, *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        self.process.kill()  # never left behind
        self.process.wait(timeout=10)
        raise AssertionError(f"the stand-in for {name} did not start")

    def events(self) -> list[str]:
        return httpx.get(self.url + "/fake/events", timeout=5).json()["events"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class RecordingMeter(Meter):
    """The product's Meter, keeping every record it is given for the test to read."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[RequestRecord] = []
        self.started = self.flushed = 0

    def record(self, rec: RequestRecord) -> None:
        self.records.append(rec)

    def start(self) -> None:
        self.started += 1

    def flush(self) -> None:
        self.flushed += 1

    def settled(self, count: int, timeout: float = 10.0) -> list[RequestRecord]:
        """The records once `count` arrived; then a moment more, so one too many shows."""
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        return list(self.records)


def make_app(
    org, name: str, endpoint: str, phase: str = "Running", served_by: str = "", **spec
) -> Application:
    """An application pointed at `endpoint`; `runtime` is the manifest's engine, `served_by`
    the runtime a backend recorded for it (Application.runtime)."""
    runtime = spec.pop("runtime", "vllm")
    manifest = {
        "apiVersion": "servedeck.io/v1",
        "kind": "Application",
        "spec": {
            "name": name,
            "profileName": "local",
            "source": {
                "type": "Model",
                "model": {"uri": f"hf://acme/{name}", "runtime": {"engine": runtime}},
            },
            **spec,
        },
    }
    return Application.objects.create(
        organization=org,
        name=name,
        profile=Profile.objects.get(organization=org, name="local"),
        manifest=manifest,
        phase=phase,
        reason="" if phase == "Running" else f"{name} is {phase.lower()} for a test",
        endpoint=endpoint if phase == "Running" else "",
        runtime=served_by,
    )


def make_key(org, name: str = "caller", **fields) -> tuple[APIKey, str]:
    lookup, plain, digest = API_KEY.mint()
    key = APIKey.objects.create(
        organization=org, name=name, lookup=lookup, secret_hash=digest, **fields
    )
    return key, plain


class LiveGateway:
    """A Gateway under uvicorn (uvloop, httptools) in a thread of the test process, so it reads
    the test database; its lifespan starts and stops it like in production."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.meter: RecordingMeter = gateway.meter  # type: ignore[assignment]
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            gateway,
            loop="uvloop",
            http="httptools",
            lifespan="on",
            log_level="warning",
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started, "the gateway did not start"

    def wait_reload(self, since: int, timeout: float = 10.0) -> None:
        """Until the gateway reloaded its snapshot after `since` reloads."""
        deadline = time.monotonic() + timeout
        while self.gateway.keeper.reloads <= since and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.gateway.keeper.reloads > since, "the gateway did not reload"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def live_gateway(interval: float = 0.2, read_timeout: float = 600.0, **kwargs) -> LiveGateway:
    keeper = SnapshotKeeper(interval=interval, redis_url=kwargs.get("redis_url"))
    gateway = Gateway(
        meter=RecordingMeter(),
        keeper=keeper,
        timeouts=Timeouts(connect=2.0, read=read_timeout),
        **kwargs,
    )
    return LiveGateway(gateway)


def caught_up(live: LiveGateway, timeout: float = 10.0) -> None:
    """Until the gateway's snapshot is of the database's current change counter."""
    from accesspolicies.models import ChangeCounter

    want = ChangeCounter.read()
    deadline = time.monotonic() + timeout
    while live.gateway.keeper.current.version != want and time.monotonic() < deadline:
        time.sleep(0.02)
    assert live.gateway.keeper.current.version == want, "the gateway did not catch up"


def fresh_minute(margin: float = 8.0) -> None:
    """Wait, if need be, until the per-minute windows have `margin` seconds left, so a test
    counting requests against a per-minute limit never sees the window turn over."""
    while time.time() % 60 > 60 - margin:
        time.sleep(0.1)
