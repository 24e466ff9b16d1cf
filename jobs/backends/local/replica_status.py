"""What a local application's status reads from its replicas: whether each serves (its
readiness path, and one real request for a runtime that answers it before loading its model:
Running means the model answered), whether it is still downloading and how far, and the last
run's log lines a Failed status quotes."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import httpx

from jobs.backends.redaction import operator_secrets, redact, secret_values

from . import download_launcher
from . import processes as proc
from .download_plan import LAUNCHER
from .replica_start import MARKER
from .state import AppState, Replica

FAILED_LOG_LINES = 20
WARM_UP_SECONDS = 5.0  # a warm-up request waits this long for the model to load


def _silence_wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV of silence: the warm-up request's audio."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()


SILENCE_WAV = _silence_wav()


def probe(state: AppState, replicas: list[Replica], probe_timeout: float) -> dict[int, bool]:
    """GET the runtime's readiness path on each live replica; a 200 means it serves. A
    runtime that answers it before loading its model is sent one warm-up request too."""
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
            if ready[replica.index] and state.ready_before_load and not replica.warmed:
                replica.warmed = warm_up(client, base, state, probe_timeout)
                ready[replica.index] = replica.warmed
    return ready


def warm_up(client: httpx.Client, base: str, state: AppState, probe_timeout: float) -> bool:
    """One real request, the smallest of the runtime's task: a one-token chat for transformers
    serve, a transcription of a moment of silence for faster-whisper-server. Both load the
    model on the first request; loading takes longer than a probe's timeout, so the server goes
    on loading after the probe gives up, and a later probe finds it loaded."""
    timeout = httpx.Timeout(max(probe_timeout, WARM_UP_SECONDS))
    try:
        if state.runtime == "transformers":
            response = client.post(
                base + "/v1/chat/completions",
                json={
                    "model": state.model_id,
                    "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 1,
                },
                timeout=timeout,
            )
        else:
            response = client.post(
                base + "/v1/audio/transcriptions",
                data={"model": state.model_id, "response_format": "json"},
                files={"file": ("warm-up.wav", SILENCE_WAV, "audio/wav")},
                timeout=timeout,
            )
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
