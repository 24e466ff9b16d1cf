"""The local backend's records and what they mean: the state kept per application, and the
status (phase, reason, next step, endpoint) derived from it. Pure, apart from the clock.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .command import replica_count
from .download_launcher import NEXT_STEP, SAY
from .first_request import first_request

PENDING, LOADING, RUNNING, FAILED, STOPPED = "Pending", "Loading", "Running", "Failed", "Stopped"
DOWNLOADING = "Downloading"
STATE_VERSION = 1
STATE_FILE = "state.json"  # an application's record, in state_dir/<app>/
STOPPED_BY_REQUEST, STOPPED_BY_SHUTDOWN = "request", "shutdown"
LOOPBACK = "127.0.0.1"


@dataclass
class Replica:
    index: int
    port: int
    pid: int | None
    start_ticks: int | None  # /proc start time: tells our process from a later one on its pid
    started_at: str  # ISO 8601, UTC
    command: list[str]
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES it was given; None on the CPU
    exit_code: int | None = None
    exited_at: str | None = None  # set once it is seen gone; exit_code may stay unknown
    boot_id: str | None = None  # pids and start times mean nothing after a reboot
    # It answered its first real request (first_request.py): only then is it ready.
    warmed: bool = False


@dataclass
class AppState:
    name: str
    revision: int | None
    manifest: dict[str, Any]
    template: str
    replicas: list[Replica] = field(default_factory=list)
    stopped: str | None = None  # STOPPED_BY_REQUEST or STOPPED_BY_SHUTDOWN
    stopped_at: str | None = None
    ports: list[int] = field(default_factory=list)  # reused on restart: a stable endpoint
    version: int = STATE_VERSION
    # The server it runs ("command": SERVEDECK_LOCAL_COMMAND; "vllm"; or a CPU runtime's
    # name), the model it is given (a folder's path or a repo id), the model id the server
    # answers to (for the gateway), and the path that answers 200 once it serves.
    runtime: str = "vllm"
    model: str = ""
    model_id: str = ""
    readiness_path: str = "/v1/models"
    # An hf:// model on a CPU runtime: what each replica downloads first (serving_plan.Download
    # as a dict: repo, commit, layout, files); `model` is then its snapshot folder.
    download: dict[str, Any] | None = None
    # What the model does (runtimes.GENERATE ...): with the runtime, it decides the real request
    # a replica answers before it reads Running (first_request.py); "" when unknown (the
    # configured command).
    task: str = ""
    # Why this server runs it (serving_plan.Plan.why, Check model's words): the model's page
    # says it beside the runtime.
    why: str = ""
    # Its hf:// LoRA adapters as pinned and downloaded at apply: name -> {repo, commit}
    # (serving_plan.adapter_folders builds each one's snapshot folder from them).
    adapter_pins: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaStatus:
    index: int
    pid: int | None
    port: int
    state: str  # "starting", "ready" or "exited"
    exit_code: int | None
    started_at: str


@dataclass(frozen=True)
class LocalStatus:
    """What the application's processes are doing, in the words of Application's fields."""

    phase: str
    reason: str
    next_step: str
    endpoint: str  # http://127.0.0.1:<port> of the first ready replica, else ""
    ready_replicas: int
    desired_replicas: int
    revision: int | None = None
    replicas: tuple[ReplicaStatus, ...] = ()
    # The server it runs ("vllm" or a CPU runtime's name), for the gateway's dialect; empty
    # for SERVEDECK_LOCAL_COMMAND, whose server the manifest's runtime.engine describes.
    runtime: str = ""
    # http://127.0.0.1:<port> of every ready replica, in replica order: the gateway routes
    # across them.
    replica_endpoints: tuple[str, ...] = ()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def seconds_between(start: str, end: str | None = None) -> float:
    later = datetime.fromisoformat(end) if end else datetime.now(UTC)
    return max(0.0, (later - datetime.fromisoformat(start)).total_seconds())


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def derive_status(
    state: AppState,
    ready: Mapping[int, bool],
    failed_lines: list[str],
    downloading: Mapping[int, str] | None = None,
) -> LocalStatus:
    """The status of an application from its state, which replicas answer, the last log
    lines of the first replica that exited, and the replicas still downloading their model
    (with their last progress line). Pure."""
    desired = replica_count(state.manifest)
    replicas = tuple(_replica_status(r, ready) for r in state.replicas)
    ready_ones = [r for r in replicas if r.state == "ready"]
    endpoints = tuple(f"http://{LOOPBACK}:{r.port}" for r in ready_ones)
    common = {
        "endpoint": endpoints[0] if endpoints else "",
        "replica_endpoints": endpoints,
        "ready_replicas": len(ready_ones),
        "desired_replicas": desired,
        "revision": state.revision,
        "replicas": replicas,
        "runtime": "" if state.runtime == "command" else state.runtime,
    }
    if state.stopped is not None:
        reason, next_step = _stopped_words(state)
        stopped = {**common, "endpoint": "", "replica_endpoints": ()}
        return LocalStatus(STOPPED, reason, next_step, **stopped)
    exited = next((r for r in state.replicas if r.exited_at is not None), None)
    if exited is not None:
        reason, next_step = _failed_words(exited, failed_lines)
        return LocalStatus(FAILED, reason, next_step, **common)
    if len(ready_ones) >= desired:
        return LocalStatus(RUNNING, "", "", **common)
    if downloading:
        index, line = min(downloading.items())
        where = state.download or {}
        repo = str(where.get("repo", "?"))
        bucket = repo.startswith(("s3://", "gs://", "https://"))
        source = (repo, "its bucket") if bucket else (f"hf://{repo}", "")
        reason = (
            f"Replica {index} is downloading {source[0]} at "
            f"{str(where.get('commit', ''))[:12]} from {source[1] or 'the Hugging Face Hub'}"
        )
        reason += f": {line.removeprefix(SAY)}" if line else "."
        return LocalStatus(DOWNLOADING, reason, "Wait; its log shows the progress.", **common)
    first = first_request(state.runtime, state.task)
    reason, next_step = _loading_words(
        replicas,
        len(ready_ones),
        desired,
        state.runtime,
        state.readiness_path,
        first.words if first else None,
    )
    return LocalStatus(LOADING, reason, next_step, **common)


def _replica_status(replica: Replica, ready: Mapping[int, bool]) -> ReplicaStatus:
    if replica.exited_at is not None:
        state = "exited"
    else:
        state = "ready" if ready.get(replica.index) else "starting"
    return ReplicaStatus(
        replica.index, replica.pid, replica.port, state, replica.exit_code, replica.started_at
    )


def _stopped_words(state: AppState) -> tuple[str, str]:
    when = state.stopped_at or "an unknown time"
    if state.stopped == STOPPED_BY_SHUTDOWN:
        reason = f"The console stopped its model servers when it shut down ({when})."
    else:
        reason = f"Stopped on request ({when}); its settings and logs are kept."
    return reason, "Start it to run it again."


def _how_it_ended(replica: Replica) -> str:
    code = replica.exit_code
    if code is None:
        return "is no longer running; its exit code is unknown, as an earlier console started it"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    if replica.pid is None:
        return f"could not be started (exit code {code})"
    return f"exited with code {code}"


def _failed_words(replica: Replica, lines: list[str]) -> tuple[str, str]:
    pid = f" (pid {replica.pid})" if replica.pid else ""
    ended = _how_it_ended(replica)
    if replica.exit_code is not None and replica.pid is not None:
        # exited_at is when the exit was seen: an upper bound, hence "within".
        lasted = span(seconds_between(replica.started_at, replica.exited_at))
        ended += f" within {lasted} of starting"
    reason = f"Replica {replica.index}{pid} {ended}."
    if lines:
        reason += " Its last log lines:\n" + "\n".join(lines)
    else:
        reason += " It wrote nothing to its log."
    return reason, _failed_next_step(replica, lines)


def _failed_next_step(replica: Replica, lines: list[str]) -> str:
    said = [line for line in lines if line.startswith(NEXT_STEP)]
    if said:  # the download launcher said what to do
        return said[-1].removeprefix(NEXT_STEP).strip()
    log = "\n".join(lines).lower()
    if "out of memory" in log or "outofmemoryerror" in log:
        return (
            "It ran out of memory: lower serving.maxContextTokens, serving.maxConcurrentRequests "
            "or engine.gpuMemoryUtilization, or use a smaller or quantised model; then deploy "
            "again."
        )
    if replica.exit_code == -signal.SIGKILL:
        return (
            "Something killed it with SIGKILL, often the kernel when the machine runs out of "
            "memory: free memory or lower serving.maxContextTokens, then Restart."
        )
    if "address already in use" in log:
        return "Another program took its port: Restart picks a free one."
    return (
        "Read the log lines above and correct the cause (the manifest's engine settings, or "
        "the machine), then deploy again; Restart runs the same revision again."
    )


# What a server does before it answers, per runtime (AppState.runtime).
LOADING_WORDS = {
    "vllm": "vLLM downloads the weights, then loads them",
    "vllm-cpu": (
        "vLLM's CPU build loads the model, compiles it for this CPU and warms up (minutes the "
        "first time; a restart finds the compiled kernels)"
    ),
    "transformers": "transformers serve loads the model from its folder",
    "infinity": "infinity-emb loads the model from its folder",
    "faster-whisper": "faster-whisper-server starts, then loads the model",
    "": "the model server starts and loads the model",
}


def _loading_words(
    replicas: tuple[ReplicaStatus, ...],
    ready: int,
    desired: int,
    runtime: str = "",
    readiness_path: str = "/v1/models",
    first: str | None = None,
) -> tuple[str, str]:
    waiting = next((r for r in replicas if r.state == "starting"), None)
    reason = f"{ready} of {desired} replicas answer."
    if waiting is not None:
        age = span(seconds_between(waiting.started_at))
        asked = f"GET {readiness_path} and {first}" if first else f"GET {readiness_path}"
        reason += (
            f" Replica {waiting.index} (port {waiting.port}) started {age} ago and has not "
            f"answered {asked} yet: {LOADING_WORDS.get(runtime, LOADING_WORDS[''])}."
        )
    return reason, "Wait; its log shows the progress."
