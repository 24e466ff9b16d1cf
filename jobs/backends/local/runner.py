"""The `local` backend: each replica of an application is a model server process on this
machine (vLLM's OpenAI server, or the command SERVEDECK_LOCAL_COMMAND names).

State (pid, port, revision, start time, command) is kept in state_dir/<app>/state.json, so a
console started again finds the servers an earlier one left running; logs are kept beside it
in replica-<n>.log. Every operation on one application holds a file lock, so the web process
and the reconciler can share a state_dir. GPUs belong to the machine: every organisation's
runner picks and records them in one ledger under one lock (gpu_ledger.py), in the folder
that holds the organisations' state folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import wave
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from jobs.manifest.problems import Problem
from models_catalog.folders import MODELS_DIR_SETTING, configured_models_dir

from . import download_launcher, model_files, serving_plan
from . import download_space as space
from . import processes as proc
from . import runtimes as rt
from .command import (
    configured_template,
    describe,
    gpus_per_replica,
    local_command,
    local_env,
    on_gpu,
    replica_count,
    server_environment,
    split_template,
)
from .gpu_ledger import GpuBook, GpuLedger, Holding, parse_gpus
from .machine_check import (
    VLLM_MISSING,
    capacity_refusals,
    check,
    downloads_reserve,
    list_gpus,
    machine,
    which,
)
from .state import (
    DOWNLOADING,
    FAILED,
    LOADING,
    PENDING,
    RUNNING,
    STOPPED,
    STOPPED_BY_REQUEST,
    STOPPED_BY_SHUTDOWN,
    AppState,
    LocalStatus,
    Replica,
    ReplicaStatus,
    derive_status,
    now_iso,
)

__all__ = [
    "DOWNLOADING",
    "FAILED",
    "LOADING",
    "PENDING",
    "RUNNING",
    "STOPPED",
    "LocalRefused",
    "LocalRunner",
    "LocalStateError",
    "LocalStatus",
    "ReplicaStatus",
    "VLLM_MISSING",
    "UnknownApplication",
    "check",
    "derive_status",
    "local_command",
]

STATE_FILE = "state.json"
FAILED_LOG_LINES = 20
MARKER = "---- servedeck: "  # starts the line written before each server start
NOT_STARTED = "servedeck: not started: "  # why a replica was refused where it starts
APP_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SPAWN_FAILED_EXIT_CODE = 127  # what a shell reports for a command it cannot run
WARM_UP_SECONDS = 5.0  # a warm-up request waits this long for the model to load
LAUNCHER = str(Path(download_launcher.__file__).resolve())
DOWNLOAD_PLAN = "download.json"


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


class LocalRefused(Exception):
    """This machine cannot run the manifest; `refusals` says why, in plain words."""

    def __init__(self, refusals: list[str]) -> None:
        super().__init__(" ".join(refusals))
        self.refusals = refusals


class UnknownApplication(LookupError):
    """No local state for this application: it was never applied here, or was deleted."""


class LocalStateError(ValueError):
    """A state file that cannot be read; the message names it."""


def check_name(name: str) -> str:
    """Application names become directory names: only DNS labels, never a path."""
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an application name (a DNS-1123 label)")
    return name


def _planned_download(path: Path) -> dict[str, Any] | None:
    """The download an application's state file names (None: none, or unreadable)."""
    try:
        planned = json.loads(path.read_text()).get("download")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(planned, dict) and {"repo", "commit"} <= planned.keys():
        return planned
    return None


def _require_capacity(manifest: Mapping[str, Any]) -> None:
    """A state written before the capacity rule (or by hand) cannot start more model servers
    than this machine holds."""
    refusals = capacity_refusals(manifest)
    if refusals:
        raise LocalRefused([p.message for p in refusals])


class LocalRunner:
    """Runs, watches and stops the model server processes of local applications."""

    def __init__(
        self,
        state_dir: Path,
        *,
        template: str | None = None,
        grace_seconds: float = 10.0,
        probe_timeout: float = 1.0,
        max_log_bytes: int = 5 * 2**20,
        token_for: Callable[[str], str | None] | None = None,
        gpu_ledger: GpuLedger | None = None,
    ) -> None:
        """`token_for(app_name)`: the application's own Hugging Face token (or None), asked
        each time one of its servers starts; never stored in its state. `gpu_ledger`: the
        machine's GPU ledger, by default in the folder above state_dir (the root every
        organisation's state folder sits in)."""
        self.state_dir = Path(state_dir)
        self.gpu_ledger = gpu_ledger or GpuLedger(self.state_dir.parent)
        self.token_for = token_for
        self.template = template if template is not None else configured_template()
        split_template(self.template)  # a bad SERVEDECK_LOCAL_COMMAND fails here, named
        self.grace_seconds = grace_seconds
        self.probe_timeout = probe_timeout
        self.max_log_bytes = max_log_bytes
        # pid -> Popen of the servers this object started: their exit codes, and reaping.
        self._children: dict[int, subprocess.Popen] = {}
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    # --- public verbs --------------------------------------------------------------------

    def check(self, manifest: Mapping[str, Any], token: str | None = None) -> list[Problem]:
        """Why this machine cannot run the manifest (each naming the field it is about);
        empty when it can. `token`: the Hugging Face token an hf:// model is read with."""
        return check(manifest, self.template, token)

    def _token(self, app_name: str) -> str | None:
        return self.token_for(app_name) if self.token_for is not None else None

    def apply(self, app_name: str, manifest: Mapping[str, Any], revision: int) -> LocalStatus:
        """Run the manifest: start its minReplicas servers, or replace them when the manifest
        (or the command template) changed. A stopped application takes the new manifest and
        stays stopped until start(). Raises LocalRefused when this machine cannot run it."""
        check_name(app_name)
        if manifest.get("spec", {}).get("name") != app_name:
            raise ValueError(f"the manifest's spec.name is not {app_name!r}")
        token = self._token(app_name)
        refusals = self.check(manifest, token)
        if refusals:
            raise LocalRefused([p.message for p in refusals])
        chosen = serving_plan.plan(manifest, self.template, token)
        if isinstance(chosen, serving_plan.Refused):  # the check above said so already
            raise LocalRefused([chosen.message])
        manifest = json.loads(json.dumps(manifest))  # a plain copy, as it will be stored
        with self._locked(app_name):
            state = self._load(app_name)
            if state is not None and self._refresh(state):
                self._save(state)
            same = state is not None and (state.manifest, state.template) == (
                manifest,
                self.template,
            )
            if same and (state.runtime, state.model) == (chosen.runtime, chosen.model):
                state.revision = revision  # the same servers now run this revision
            else:
                with self._gpu_book(manifest, state) as book:
                    gpus = self._plan_gpus(app_name, manifest, book)
                    if state is not None:
                        self._terminate(state.replicas)
                    old = state.download if state is not None else None
                    state = self._replaced(app_name, manifest, revision, state, chosen)
                    # Recorded before its replicas download into it; the old one goes when
                    # no application uses it any more.
                    self._refer(app_name, state.download, old)
                    if state.stopped is None:
                        self._start_replicas(state, range(replica_count(manifest)), gpus)
                    self._record_gpus(book, state)
            self._save(state)
            return self._status(state)

    def restart(self, app_name: str) -> LocalStatus:
        """Replace every server with a new process; settings, ports and logs are kept."""
        with self._locked(check_name(app_name)):
            state = self._require(app_name)
            _require_capacity(state.manifest)  # before anything is stopped
            with self._gpu_book(state.manifest, state) as book:
                self._terminate(state.replicas)
                self._record_gpus(book, None, app_name)
                gpus = self._plan_gpus(app_name, state.manifest, book)
                state.replicas, state.stopped, state.stopped_at = [], None, None
                self._start_replicas(state, range(replica_count(state.manifest)), gpus)
                self._record_gpus(book, state)
            self._save(state)
            return self._status(state)

    def stop(self, app_name: str) -> LocalStatus:
        """Stop every server; the manifest, ports and logs are kept for start()."""
        with self._locked(check_name(app_name)):
            state = self._require(app_name)
            self._stop(state, STOPPED_BY_REQUEST)
            return self._status(state)

    def start(self, app_name: str) -> LocalStatus:
        """Start the servers that are not running (all of them after stop())."""
        with self._locked(check_name(app_name)):
            state = self._require(app_name)
            self._refresh(state)
            running = [r for r in state.replicas if r.exited_at is None]
            _require_capacity(state.manifest)
            missing = sorted(set(range(replica_count(state.manifest))) - {r.index for r in running})
            if missing:
                with self._gpu_book(state.manifest, state) as book:
                    gpus = self._plan_gpus(app_name, state.manifest, book, keep=running)
                    state.replicas = running
                    self._start_replicas(state, missing, gpus)
                    self._record_gpus(book, state)
            state.stopped = state.stopped_at = None
            self._save(state)
            return self._status(state)

    def delete(self, app_name: str) -> None:
        """Stop every server and remove the application's state and logs. Idempotent."""
        with self._locked(check_name(app_name)):
            state = None
            with contextlib.suppress(LocalStateError):
                state = self._load(app_name)
                if state is not None:
                    self._terminate(state.replicas)
            with self.gpu_ledger.held() as book:  # an unreadable state may still hold GPUs
                self._record_gpus(book, None, app_name)
            shutil.rmtree(self._dir(app_name), ignore_errors=True)
            self._refer(app_name, None, state.download if state is not None else None)

    def observe(self, app_name: str) -> LocalStatus:
        """The application's phase, reason, next step and endpoint, from its processes and a
        GET /v1/models on each. Never raises for an unknown application (Pending)."""
        with self._locked(check_name(app_name)):
            try:
                state = self._load(app_name)
            except LocalStateError as exc:
                return LocalStatus(
                    FAILED, str(exc), "Delete the application, then deploy it again.", "", 0, 0
                )
            if state is None:
                return LocalStatus(
                    PENDING,
                    f"Nothing has been started for {app_name} on this machine.",
                    "Deploy it.",
                    "",
                    0,
                    0,
                )
            if self._refresh(state):
                self._save(state)
            for replica in state.replicas:
                proc.cap_log(self._log(app_name, replica.index), self.max_log_bytes)
            return self._status(state)

    def tail(self, app_name: str, n: int = 100, replica: int = 0) -> list[str]:
        """The last n lines of a replica's log (across its rotation)."""
        return proc.tail_lines(self._log(check_name(app_name), replica), n)

    def follow(
        self, app_name: str, replica: int, n: int, after: proc.LogCursor | None, max_bytes: int
    ) -> tuple[list[str], proc.LogCursor]:
        """A replica's log to follow: the last n complete lines and a cursor after them, or
        (with `after`) the lines written since that cursor, at most n, and the next cursor."""
        path = self._log(check_name(app_name), replica)
        if after is None:
            return proc.tail_with_cursor(path, n)
        return proc.lines_after(path, after, n, max_bytes)

    def applications(self) -> list[str]:
        """The applications this state_dir holds state for."""
        if not self.state_dir.is_dir():
            return []
        return sorted(
            p.name
            for p in self.state_dir.iterdir()
            if APP_NAME.fullmatch(p.name) and (p / STATE_FILE).exists()
        )

    def shutdown(self) -> None:
        """Stop every server of every application (marked as stopped by shutdown, so
        resume() brings them back); afterwards nothing this runner started is running."""
        for name in self.applications():
            with self._locked(name), contextlib.suppress(LocalStateError):
                state = self._load(name)
                if state is not None and state.stopped is None:
                    self._stop(state, STOPPED_BY_SHUTDOWN)
        # Children no state file names any more (a state edited or deleted behind our back).
        leftovers = [p for p in list(self._children.values()) if p.poll() is None]
        proc.terminate([proc.Target(p.pid, None, p) for p in leftovers], self.grace_seconds)
        self._children.clear()

    def resume(self) -> list[str]:
        """Start again the applications shutdown() stopped; returns their names."""
        resumed = []
        for name in self.applications():
            # One that no longer fits this machine stays stopped; its status says why on start.
            with contextlib.suppress(LocalStateError, LocalRefused):
                state = self._load(name)
                if state is not None and state.stopped == STOPPED_BY_SHUTDOWN:
                    self.start(name)
                    resumed.append(name)
        return resumed

    # --- state ---------------------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        return self.state_dir / name

    def _log(self, name: str, index: int) -> Path:
        return self._dir(name) / f"replica-{index}.log"

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        lock_dir = self.state_dir / ".locks"
        proc.private_dir(lock_dir)
        with lock, open(lock_dir / f"{name}.lock", "a", opener=proc.private_opener) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
            yield

    def _load(self, name: str) -> AppState | None:
        path = self._dir(name) / STATE_FILE
        try:
            data = json.loads(path.read_text())
            data["replicas"] = [Replica(**r) for r in data.get("replicas", [])]
            return AppState(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as exc:
            raise LocalStateError(
                f"The local backend's state file {path} cannot be read ({exc}); the servers it "
                "named cannot be found."
            ) from None

    def _save(self, state: AppState) -> None:
        folder = self._dir(state.name)
        proc.private_dir(folder)
        temporary = folder / f".{STATE_FILE}.tmp"
        with open(temporary, "w", opener=proc.private_opener) as handle:
            handle.write(json.dumps(asdict(state), indent=1))
        os.replace(temporary, folder / STATE_FILE)  # readers never see half a file

    def _require(self, name: str) -> AppState:
        state = self._load(name)
        if state is None:
            raise UnknownApplication(f"{name} has not been deployed on this machine; deploy it.")
        return state

    def _replaced(
        self,
        name: str,
        manifest: dict[str, Any],
        revision: int,
        old: AppState | None,
        chosen: serving_plan.Plan,
    ) -> AppState:
        return AppState(
            name=name,
            revision=revision,
            manifest=manifest,
            template=self.template,
            stopped=old.stopped if old else None,
            stopped_at=old.stopped_at if old else None,
            ports=old.ports if old else [],
            runtime=chosen.runtime,
            model=chosen.model,
            # vLLM and the configured command answer to the application's name
            # (--served-model-name) and are ready once GET /v1/models answers; a CPU runtime's
            # own are its Launch's, recorded when a replica starts (_start_one).
            model_id=name,
            download=chosen.download.as_dict() if chosen.download else None,
        )

    # --- processes -----------------------------------------------------------------------

    def _alive(self, replica: Replica) -> bool:
        if replica.exited_at is not None or replica.pid is None:
            return False
        popen = self._children.get(replica.pid)
        if popen is not None:
            return popen.poll() is None
        if replica.boot_id != proc.boot_id():
            return False
        return proc.runs_command(replica.pid, replica.start_ticks, replica.command)

    def _refresh(self, state: AppState) -> bool:
        """Record the replicas that have exited since last seen; True when any had."""
        changed = False
        for replica in state.replicas:
            if replica.exited_at is None and not self._alive(replica):
                popen = self._children.pop(replica.pid, None) if replica.pid else None
                if popen is not None:
                    replica.exit_code = popen.returncode
                elif replica.pid is not None:
                    # Another process of this console started it (the web process, when this
                    # is the reconciler): its exit status waits in /proc until that one reaps
                    # it. Unknown only when an earlier console started it.
                    if proc.exiting(replica.pid, replica.start_ticks):
                        continue  # not a zombie yet: its status is readable at the next look
                    replica.exit_code = proc.exit_code_of_exited(replica.pid, replica.start_ticks)
                replica.exited_at = now_iso()
                changed = True
        return changed

    def _terminate(self, replicas: list[Replica]) -> None:
        # Exited replicas too: a server's workers can outlive it in its process group.
        targets = [
            proc.Target(r.pid, r.start_ticks, self._children.get(r.pid))
            for r in replicas
            if r.pid is not None and r.start_ticks is not None and r.boot_id == proc.boot_id()
        ]
        proc.terminate(targets, self.grace_seconds)
        for target in targets:
            self._children.pop(target.pgid, None)

    def _stop(self, state: AppState, why: str) -> None:
        with self._gpu_book(None, state) as book:
            self._terminate(state.replicas)
            state.replicas, state.stopped, state.stopped_at = [], why, now_iso()
            self._record_gpus(book, state)
        self._save(state)

    def _start_replicas(
        self, state: AppState, indices: Iterable[int], gpus: Mapping[int, str | None]
    ) -> None:
        _require_capacity(state.manifest)  # the last guard: never more servers than fit
        taken = {r.port for r in state.replicas}
        for index in indices:
            prefer = state.ports[index] if index < len(state.ports) else None
            port = proc.free_port(prefer, avoid=taken)
            taken.add(port)
            state.replicas.append(self._start_one(state, index, port, gpus.get(index)))
            state.ports.extend([0] * (index + 1 - len(state.ports)))
            state.ports[index] = port
        state.replicas.sort(key=lambda r: r.index)
        state.template = self.template

    def _cpu_launch(self, state: AppState, port: int, model: str) -> rt.Launch:
        """A CPU runtime's replica, serving the application's model as its name.

        transformers serve names a folder's model by the folder's own name: it is given a
        link named after the application (in the application's state folder) to the model
        folder, so it answers to the name clients send, like every other runtime here.
        `model` is the folder as resolved just now (_start_one)."""
        if state.runtime == rt.TRANSFORMERS.name:
            links = proc.private_dir(self._dir(state.name) / "model")
            link = links / state.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(model, target_is_directory=True)
            model = str(link)
        serving = (state.manifest["spec"]["source"]["model"].get("serving")) or {}
        return rt.cpu_launch(
            state.runtime,
            model=model,
            name=state.name,
            port=port,
            runtimes_dir=rt.configured_runtimes_dir(),
            max_concurrent=serving.get("maxConcurrentRequests"),
        )

    def _start_one(self, state: AppState, index: int, port: int, gpus: str | None) -> Replica:
        # The model folder is checked here, where it is used, at every start: a folder
        # swapped for a link out of the models folder since apply is not served.
        source = serving_plan.model_source(state.manifest)
        if isinstance(source, serving_plan.Refused):
            return self._not_started(state, index, port, gpus)
        cwd, spawned = None, None
        if state.runtime in rt.CPU_RUNTIMES:
            model = source[1]
            if state.download is not None:
                try:
                    model = str(self._snapshot(state, source))
                except ValueError as exc:
                    return self._not_started(state, index, port, gpus, str(exc))
            elif state.runtime == rt.INFINITY.name:
                # The files on disk are what infinity reads: the classes they name are checked
                # here, at every start (a downloaded snapshot: by the launcher, once it is
                # complete). The folder is the operator's; the check names the file and value.
                why = model_files.folder_refusal(Path(model), f"file://{model}")
                if why is not None:
                    step = "Correct the folder's files, or deploy another model; then Restart."
                    return self._not_started(state, index, port, gpus, why, step)
            launch = self._cpu_launch(state, port, model)
            command, cwd = launch.argv, launch.cwd
            # How this runtime is probed and named: the launch decides, the state keeps it.
            state.model_id, state.readiness_path = launch.model_id, launch.readiness_path
            state.ready_before_load = launch.ready_before_load
            if state.download is not None:
                # The replica downloads first, then execs the runtime: its recorded command is
                # the runtime's, which the launcher's command line ends with (runs_command).
                spawned = [sys.executable, LAUNCHER, self._write_plan(state), "--", *command]
            # Its own Hugging Face home: nothing of the console's cache is read or written
            # (HF_HUB_CACHE or TRANSFORMERS_CACHE passed from the console would lead back).
            home = self._dir(state.name) / "hf-home"
            extra = {
                **launch.env,
                "HF_HOME": str(home),
                "HF_HUB_CACHE": str(home / "hub"),
                "TRANSFORMERS_CACHE": str(home / "hub"),
                "CUDA_VISIBLE_DEVICES": "",
            }
        else:
            # The folder as resolved and checked just now (model_source), not the typed path.
            command = local_command(state.manifest, port, self.template, model=source[1])
            command[0] = which(command[0]) or command[0]
            # On the CPU no GPU is visible, so a replica never takes one another app was given.
            extra = {**local_env(state.manifest), "CUDA_VISIBLE_DEVICES": gpus or ""}
        # A CPU runtime reads a folder offline: it is given no Hugging Face token at all. The
        # launcher of a download is (HF_TOKEN), and takes it out before it execs the runtime.
        wants_token = state.runtime not in rt.CPU_RUNTIMES or spawned is not None
        token = self._token(state.name) if wants_token else None
        if spawned is not None:
            extra = {k: v for k, v in extra.items() if k not in rt.OFFLINE_ENV}
        env = server_environment(os.environ, extra, token)
        log_path = self._log(state.name, index)
        proc.private_dir(log_path.parent)
        started_at = now_iso()
        with open(log_path, "a", encoding="utf-8", opener=proc.private_opener) as log:
            log.write(
                f"{MARKER}replica {index} of {state.name}, revision {state.revision}, "
                f"started {started_at}: {describe(command)}\n"
            )
        try:
            popen = proc.spawn(spawned or command, env, log_path, cwd=cwd)
        except OSError as exc:
            with open(log_path, "a", encoding="utf-8", opener=proc.private_opener) as log:
                log.write(f"could not start {command[0]}: {exc}\n")
            return Replica(
                index, port, None, None, started_at, command, gpus,
                exit_code=SPAWN_FAILED_EXIT_CODE, exited_at=now_iso(),
            )  # fmt: skip
        self._children[popen.pid] = popen
        stat = proc.any_stat(popen.pid)  # a server that failed at once is a zombie already
        ticks = stat.start_ticks if stat is not None else None
        return Replica(
            index, port, popen.pid, ticks, started_at, command, gpus, boot_id=proc.boot_id()
        )

    def _not_started(
        self,
        state: AppState,
        index: int,
        port: int,
        gpus: str | None,
        why: str | None = None,
        next_step: str | None = None,
    ) -> Replica:
        """A replica whose model folder is refused now: never spawned, failed, with why (and
        the next step, which its status shows) in its log (the models folder is the
        operator's; nothing from the manifest is written)."""
        log_path = self._log(state.name, index)
        proc.private_dir(log_path.parent)
        started_at = now_iso()
        root = configured_models_dir()
        why = why or (
            f"spec.source.model.uri no longer names a folder inside the models folder {root} "
            f"({MODELS_DIR_SETTING}). Put the model's folder back there, or apply the "
            "application with a folder that is; Check model on the uri says what is wrong"
        )
        with open(log_path, "a", encoding="utf-8", opener=proc.private_opener) as log:
            # The status quotes the lines after the marker: why, and the next step.
            log.write(
                f"{MARKER}replica {index} of {state.name}, revision {state.revision}, "
                f"not started {started_at}.\n{NOT_STARTED}{why.rstrip('.')}.\n"
            )
            if next_step is not None:
                log.write(f"{download_launcher.NEXT_STEP}{next_step}\n")
        return Replica(
            index, port, None, None, started_at, [], gpus,
            exit_code=SPAWN_FAILED_EXIT_CODE, exited_at=now_iso(),
        )  # fmt: skip

    def _snapshot(self, state: AppState, source: tuple[str, str, str | None]) -> Path:
        """The snapshot folder an hf:// replica is served from, built again from the manifest
        as it is now and the commit resolved at apply (checked: a repo id and a commit, inside
        the downloads folder); raises ValueError with why."""
        scheme, repo, revision = source
        planned = state.download or {}
        commit = str(planned.get("commit", ""))
        if scheme != "hf" or repo != planned.get("repo"):
            raise ValueError("spec.source.model.uri is not the repository the plan downloads")
        if revision is not None and rt.COMMIT.fullmatch(revision) and revision != commit:
            raise ValueError("spec.source.model.uri is pinned to another commit; deploy again")
        return rt.snapshot_folder(rt.configured_downloads_dir(), repo, commit)

    def _refer(
        self, name: str, download: Mapping[str, Any] | None, old: Mapping[str, Any] | None
    ) -> None:
        """Records in the downloads folder the snapshot the application now uses (None: none),
        and deletes the one it used before (`old`) when no application of this console uses
        it any more: the folder is shared by every organisation, so another's reference or
        state keeps it."""

        def snapshot(planned: Mapping[str, Any] | None) -> tuple[str, str] | None:
            return (str(planned["repo"]), str(planned["commit"])) if planned else None

        owner = str(self._dir(name).absolute())
        in_states = {
            found
            for path in self.state_dir.parent.glob(f"*/*/{STATE_FILE}")
            if path.parent.absolute() != Path(owner)
            and (found := snapshot(_planned_download(path))) is not None
        }
        # A downloads folder that cannot be written loses only this record (the states above
        # keep a snapshot in use either way); the download itself then says why it failed.
        with contextlib.suppress(OSError):
            space.refer(
                rt.configured_downloads_dir(), owner, snapshot(download), snapshot(old), in_states
            )

    def _write_plan(self, state: AppState) -> str:
        """The download launcher's plan, in the application's private state folder."""
        planned = dict(state.download or {})
        planned["downloads_dir"] = str(rt.configured_downloads_dir().absolute())
        planned["runtime"] = state.runtime  # infinity's snapshot is checked (model_files)
        # The disk the downloads folder keeps free, and the most one download may take: the
        # weights a CPU runtime holds in this machine's memory (machine_check decides both).
        planned["reserve"] = downloads_reserve(rt.configured_downloads_dir())
        planned["max_bytes"] = machine().memory
        path = proc.private_dir(self._dir(state.name)) / DOWNLOAD_PLAN
        temporary = path.with_name(f".{DOWNLOAD_PLAN}.tmp")
        with open(temporary, "w", opener=proc.private_opener) as handle:
            handle.write(json.dumps(planned))
        os.replace(temporary, path)
        return str(path)

    def _owner(self, name: str) -> str:
        """The application's name in the machine's GPU ledger: organisation folder and name."""
        return f"{self.state_dir.name}/{name}"

    def _gpu_book(
        self, manifest: Mapping[str, Any] | None, state: AppState | None
    ) -> contextlib.AbstractContextManager[GpuBook | None]:
        """The machine's GPU ledger, locked, when the manifest wants GPUs or the state's
        replicas hold some; else nothing (CPU applications never wait for the ledger)."""
        holding = state is not None and any(r.gpus for r in state.replicas)
        if holding or (manifest is not None and on_gpu(manifest)):
            return self.gpu_ledger.held()
        return contextlib.nullcontext(None)

    def _record_gpus(self, book: GpuBook | None, state: AppState | None, name: str = "") -> None:
        """The ledger now holds, for this application, exactly its live replicas' GPUs
        (nothing when `state` is None)."""
        if book is None:
            return
        owner = self._owner(state.name if state is not None else name)
        book.release(owner)
        for replica in state.replicas if state is not None else []:
            gpus = parse_gpus(replica.gpus)
            if gpus and replica.pid is not None and replica.exited_at is None:
                book.record(
                    Holding(
                        owner, replica.index, gpus, replica.pid, replica.start_ticks,
                        replica.boot_id,
                    )
                )  # fmt: skip

    def _plan_gpus(
        self,
        name: str,
        manifest: Mapping[str, Any],
        book: GpuBook | None,
        keep: list[Replica] | None = None,
    ) -> dict[int, str | None]:
        """CUDA_VISIBLE_DEVICES for each replica to start: GPUs no other replica on this
        machine holds, whatever its organisation (the ledger, locked by the caller until the
        servers are started and recorded). Raises LocalRefused when too few are free."""
        if not on_gpu(manifest) or book is None:
            return {}
        per_replica = gpus_per_replica(manifest)
        keep = keep or []
        kept = {r.index for r in keep}
        wanted = [i for i in range(replica_count(manifest)) if i not in kept]
        gpus, problem = list_gpus()
        if problem is not None:
            raise LocalRefused([f"No NVIDIA GPU can be used on this machine: {problem}."])
        used = book.in_use(exclude_owner=self._owner(name)) | {
            g for r in keep for g in parse_gpus(r.gpus)
        }
        free = [g for g in gpus if g not in used]
        if len(free) < per_replica * len(wanted):
            raise LocalRefused(
                [
                    f"{name} needs {per_replica * len(wanted)} GPU(s) and {len(free)} of this "
                    f"machine's {len(gpus)} are free (other local applications, of any "
                    "organisation, hold the rest); "
                    "stop one of them, or lower countPerReplica or minReplicas."
                ]
            )
        plan = {}
        for position, index in enumerate(wanted):
            chosen = free[position * per_replica : (position + 1) * per_replica]
            plan[index] = ",".join(str(g) for g in chosen)
        return plan

    # --- status --------------------------------------------------------------------------

    def _ready(self, state: AppState, replicas: list[Replica]) -> dict[int, bool]:
        """GET the runtime's readiness path on each live replica; a 200 means it serves. A
        runtime that answers it before loading its model is sent one warm-up request too."""
        ready = {}
        timeout = httpx.Timeout(self.probe_timeout)
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
                    replica.warmed = self._warm_up(client, base, state.model_id)
                    ready[replica.index] = replica.warmed
        return ready

    def _warm_up(self, client: httpx.Client, base: str, model_id: str) -> bool:
        """One transcription of a moment of silence: faster-whisper-server loads its model on
        the first request. Loading takes longer than a probe's timeout: the server goes on
        loading after the probe gives up, and a later probe finds it loaded."""
        try:
            response = client.post(
                base + "/v1/audio/transcriptions",
                data={"model": model_id, "response_format": "json"},
                files={"file": ("warm-up.wav", SILENCE_WAV, "audio/wav")},
                timeout=httpx.Timeout(max(self.probe_timeout, WARM_UP_SECONDS)),
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _status(self, state: AppState) -> LocalStatus:
        live = [r for r in state.replicas if r.exited_at is None]
        warmed = [r.warmed for r in live]
        ready = self._ready(state, live) if state.stopped is None else {}
        if [r.warmed for r in live] != warmed:
            self._save(state)
        exited = next((r for r in state.replicas if r.exited_at is not None), None)
        lines = self._quoted_lines(state.name, exited.index) if exited else []
        downloading = {
            r.index: self._progress(state.name, r.index)
            for r in live
            if state.download is not None and r.pid is not None and self._downloading(r)
        }
        return derive_status(state, ready, lines, downloading)

    @staticmethod
    def _downloading(replica: Replica) -> bool:
        """The replica's process is still the download launcher (it has not exec'd yet)."""
        cmdline = proc.proc_cmdline(replica.pid) if replica.pid else None
        return bool(cmdline) and LAUNCHER in cmdline[:3]

    def _progress(self, name: str, index: int) -> str:
        lines = self._last_run_lines(name, index)
        said = [line for line in lines if line.startswith(download_launcher.SAY)]
        return said[-1] if said else ""

    def _quoted_lines(self, name: str, index: int) -> list[str]:
        """The last run's lines as a Failed status quotes them (on every page, in the events):
        redacted as the log tail is (jobs/replica_logs.py, the one place that decides)."""
        from jobs.replica_logs import operator_secrets, redact, secret_values

        secrets = operator_secrets() | secret_values(extra=[self._token(name)])
        return redact(self._last_run_lines(name, index), secrets)

    def _last_run_lines(self, name: str, index: int) -> list[str]:
        """The log lines of the replica's latest run, at most FAILED_LOG_LINES of them."""
        lines = proc.tail_lines(self._log(name, index), FAILED_LOG_LINES + 1)
        starts = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
        if starts:
            lines = lines[starts[-1] + 1 :]
        return lines[-FAILED_LOG_LINES:]
