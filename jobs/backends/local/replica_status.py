"""What a local application's status reads from its replicas: whether each serves (its
readiness path, then one real request of its model's task: Running means the model answered),
whether it is still downloading and how far, and the last run's log lines a Failed status
quotes."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

from jobs.backends.redaction import operator_secrets, redact, secret_values

from . import download_launcher
from . import processes as proc
from .download_plan import LAUNCHER
from .first_request import FirstRequest, first_request
from .replica_start import MARKER
from .state import AppState, Replica

FAILED_LOG_LINES = 20
# A warm-up request waits this long for the model to load on its first request (transformers
# serve on 2 cores under load took minutes); a probe never waits for it.
WARM_UP_SECONDS = 600.0
# One warm-up request in flight per replica process, sent from these threads: a probe that sent
# one each time would queue a request per probe in a server still loading (seen: nine queued,
# and the server killed for its memory).
_warming: dict[tuple[int, int], Future] = {}
_warming_lock = threading.Lock()
_warmers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="servedeck-warm-up")


def probe(state: AppState, replicas: list[Replica], probe_timeout: float) -> dict[int, bool]:
    """GET the runtime's readiness path on each live replica; once it answers 200, the replica
    is sent one real request of its model's task (warmed), and serves only once that was
    answered: a server may answer its readiness path before its model is loaded
    (faster-whisper-server, transformers serve), and a replica reading Running must answer."""
    ready = {}
    timeout = httpx.Timeout(probe_timeout)
    # trust_env=False: an HTTP(S)_PROXY in the environment must not carry loopback probes.
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for replica in replicas:
            base = f"http://{proc.LOOPBACK}:{replica.port}"
            try:
                response = client.get(base + state.readiness_path)
                ready[replica.index] = response.status_code == 200
            except httpx.HTTPError:
                ready[replica.index] = False
            if ready[replica.index] and not replica.warmed:
                replica.warmed = warmed(base, state, replica)
                ready[replica.index] = replica.warmed
    return ready


def warmed(base: str, state: AppState, replica: Replica) -> bool:
    """Whether the replica answered its first real request (first_request.py): True at once
    for a server whose task is unknown (the configured command); else the request is sent once,
    in the background, and a later probe reads its answer (a failed one is sent again then). A
    server that loads its model on the first request (transformers serve,
    faster-whisper-server) takes longer than a probe may wait."""
    first = first_request(state.runtime, state.task)
    if first is None:
        return True
    key = (replica.pid or 0, replica.port)
    with _warming_lock:
        sent = _warming.get(key)
        if sent is None:
            _warming[key] = _warmers.submit(_ask, base, first, state.model_id)
            return False
        if not sent.done():
            return False
        del _warming[key]
    return sent.result()


def _ask(base: str, first: FirstRequest, model_id: str) -> bool:
    try:
        with httpx.Client(timeout=httpx.Timeout(WARM_UP_SECONDS), trust_env=False) as client:
            response = client.post(base + first.route, **first.httpx_arguments(model_id))
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def downloading(replica: Replica) -> bool:
    """The replica's process is still the download launcher (it has not exec'd yet)."""
    cmdline = proc.proc_cmdline(replica.pid) if replica.pid else None
    return bool(cmdline) and LAUNCHER in cmdline[:3]


def progress(log_path: Path) -> str:
    """The download's progress, as the launcher last said it in the replica's log."""
    lines = last_run_lines(log_path)
    said = [line for line in lines if line.startswith(download_launcher.SAY)]
    return said[-1] if said else ""


def quoted_lines(log_path: Path, token: str | None) -> list[str]:
    """The last run's lines as a Failed status quotes them (on every page, in the events):
    redacted as the log tail is (jobs/backends/redaction.py), the application's Hugging Face
    `token` too."""
    secrets = operator_secrets() | secret_values(extra=[token])
    return redact(last_run_lines(log_path), secrets)


def last_run_lines(log_path: Path) -> list[str]:
    """The log lines of the replica's latest run, at most FAILED_LOG_LINES of them."""
    lines = proc.tail_lines(log_path, FAILED_LOG_LINES + 1)
    starts = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
    if starts:
        lines = lines[starts[-1] + 1 :]
    return lines[-FAILED_LOG_LINES:]
