"""The `local` backend: each replica of an application is a model server process on this
machine (vLLM's OpenAI server, or the command SERVEDECK_LOCAL_COMMAND names).

State (pid, port, revision, start time, command) is kept in state_dir/<app>/state.json, so a
console started again finds the servers an earlier one left running; logs are kept beside it
in replica-<n>.log. Every operation on one application holds a file lock, so the web process
and the reconciler can share a state_dir. GPUs belong to the machine: every organisation's
runner picks and records them in one ledger under one lock (gpu_plan.py, gpu_ledger.py), in
the folder that holds the organisations' state folders. Starting a replica, reading what its
status says, and an hf:// model's download are in replica_start.py, replica_status.py and
download_plan.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobs.manifest import adapters as lora
from jobs.manifest.problems import Problem
from jobs.storage_access import ANONYMOUS, Credentials

from . import (
    adapter_downloads,
    adapter_swap,
    download_plan,
    replica_start,
    replica_status,
    serving_plan,
)
from . import processes as proc
from . import runtimes as rt
from .command import configured_template, local_command, replica_count, split_template
from .errors import LocalRefused, LocalStateError, UnknownApplication
from .gpu_ledger import GpuLedger
from .gpu_plan import GpuPlanner
from .machine_check import VLLM_MISSING, capacity_refusals, check
from .state import (
    DOWNLOADING,
    FAILED,
    LOADING,
    PENDING,
    RUNNING,
    STATE_FILE,
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

APP_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_name(name: str) -> str:
    """Application names become directory names: only DNS labels, never a path."""
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an application name (a DNS-1123 label)")
    return name


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
        storage_for: Callable[[str], Credentials | None] | None = None,
    ) -> None:
        """`token_for(app_name)`: the application's own Hugging Face token (or None), asked
        each time one of its servers starts; never stored in its state. `gpu_ledger`: the
        machine's GPU ledger, by default in the folder above state_dir (the root every
        organisation's state folder sits in)."""
        self.state_dir = Path(state_dir)
        self.gpu_ledger = gpu_ledger or GpuLedger(self.state_dir.parent)
        self._gpus = GpuPlanner(self.gpu_ledger, self.state_dir.name)
        self.token_for = token_for
        # `storage_for(app_name)`: its profile's storage credentials for an s3:// or gs:// folder
        # (None: not usable now), asked at apply and at each start; never stored.
        self.storage_for = storage_for
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

    def check(
        self,
        manifest: Mapping[str, Any],
        token: str | None = None,
        storage: Credentials | None = ANONYMOUS,
    ) -> list[Problem]:
        """Why this machine cannot run the manifest (each naming the field it is about);
        empty when it can. `token`: the Hugging Face token an hf:// model is read with;
        `storage`: the storage credentials an s3:// or gs:// folder is read with."""
        return check(manifest, self.template, token, storage)

    def _token(self, app_name: str) -> str | None:
        return self.token_for(app_name) if self.token_for is not None else None

    def _storage(self, app_name: str) -> Credentials | None:
        return self.storage_for(app_name) if self.storage_for is not None else ANONYMOUS

    def apply(self, app_name: str, manifest: Mapping[str, Any], revision: int) -> LocalStatus:
        """Run the manifest: start its minReplicas servers, or replace them when the manifest
        (or the command template) changed. A stopped application takes the new manifest and
        stays stopped until start(). Raises LocalRefused when this machine cannot run it."""
        check_name(app_name)
        if manifest.get("spec", {}).get("name") != app_name:
            raise ValueError(f"the manifest's spec.name is not {app_name!r}")
        token, storage = self._token(app_name), self._storage(app_name)
        refusals = self.check(manifest, token, storage)
        if refusals:
            raise LocalRefused([p.message for p in refusals])
        chosen = serving_plan.plan(manifest, self.template, token, storage)
        if isinstance(chosen, serving_plan.Refused):  # the check above said so already
            raise LocalRefused([chosen.message])
        pins = self._download_adapters(chosen, token)
        manifest = json.loads(json.dumps(manifest))  # a plain copy, as it will be stored
        with self._locked(app_name):
            state = self._load(app_name)
            if state is not None and self._refresh(state):
                self._save(state)
            same = state is not None and (state.manifest, state.template) == (
                manifest,
                self.template,
            )
            same = same and state.adapter_pins == pins  # a moved revision: other files
            if same and (state.runtime, state.model) == (chosen.runtime, chosen.model):
                state.revision = revision  # the same servers now run this revision
                state.task, state.why = chosen.task, chosen.why
            elif self._adapters_swapped(state, manifest, chosen, pins):
                # Only its LoRA adapters changed: the running servers loaded them.
                state.manifest, state.revision, state.adapter_pins = manifest, revision, pins
                state.task, state.why = chosen.task, chosen.why
            else:
                with self._gpus.book(manifest, state) as book:
                    gpus = self._gpus.plan(app_name, manifest, book)
                    if state is not None:
                        self._terminate(state.replicas)
                    old = state.download if state is not None else None
                    state = self._replaced(app_name, manifest, revision, state, chosen, pins)
                    # Recorded before its replicas download into it; the old one goes when
                    # no application uses it any more.
                    download_plan.refer(
                        self.state_dir.parent, self._dir(app_name), state.download, old
                    )
                    if state.stopped is None:
                        self._start_replicas(state, range(replica_count(manifest)), gpus)
                    self._gpus.record(book, state)
            self._save(state)
            return self._status(state)

    def restart(self, app_name: str) -> LocalStatus:
        """Replace every server with a new process; settings, ports and logs are kept."""
        with self._locked(check_name(app_name)):
            state = self._require(app_name)
            _require_capacity(state.manifest)  # before anything is stopped
            with self._gpus.book(state.manifest, state) as book:
                self._terminate(state.replicas)
                self._gpus.record(book, None, app_name)
                gpus = self._gpus.plan(app_name, state.manifest, book)
                state.replicas, state.stopped, state.stopped_at = [], None, None
                self._start_replicas(state, range(replica_count(state.manifest)), gpus)
                self._gpus.record(book, state)
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
                with self._gpus.book(state.manifest, state) as book:
                    gpus = self._gpus.plan(app_name, state.manifest, book, keep=running)
                    state.replicas = running
                    self._start_replicas(state, missing, gpus)
                    self._gpus.record(book, state)
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
                self._gpus.record(book, None, app_name)
            shutil.rmtree(self._dir(app_name), ignore_errors=True)
            old = state.download if state is not None else None
            download_plan.refer(self.state_dir.parent, self._dir(app_name), None, old)

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

    def chosen_because(self, app_name: str) -> str:
        """Why its server was chosen, as Check model said it when it was applied ("" when
        unknown: not applied here, or by an older console)."""
        state = self._load(app_name)
        return state.why if state is not None else ""

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
            # Written by consoles before every runtime answered a first request (state.task
            # and the runtime decide it now).
            data.pop("ready_before_load", None)
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

    def _download_adapters(
        self, chosen: serving_plan.Plan, token: str | None
    ) -> dict[str, dict[str, str]]:
        """The plan's hf:// adapters downloaded (adapter_downloads.py), as the state pins them;
        raises LocalRefused naming the adapter when one cannot be."""
        try:
            for download in chosen.adapters:
                adapter_downloads.fetch(download, token)
        except adapter_downloads.AdapterDownloadFailed as exc:
            raise LocalRefused([str(exc)]) from None
        return {download.name: download.pin for download in chosen.adapters}

    def _adapters_swapped(
        self,
        state: AppState | None,
        manifest: dict[str, Any],
        chosen: serving_plan.Plan,
        pins: dict[str, dict[str, str]],
    ) -> bool:
        """Whether the running replicas of a vLLM took `manifest`'s adapters without a restart
        (adapter_swap.py); False when anything else changed or a replica did not."""
        if (
            state is None
            or state.stopped is not None
            or state.template != self.template
            or (state.runtime, state.model) != (chosen.runtime, chosen.model)
            or state.runtime not in (serving_plan.COMMAND, rt.VLLM, rt.VLLM_CPU.name)
        ):
            return False
        old = serving_plan.adapter_folders(state.manifest, state.adapter_pins)
        new = serving_plan.adapter_folders(manifest, pins)
        if isinstance(old, serving_plan.Refused) or isinstance(new, serving_plan.Refused):
            return False
        changes = lora.runtime_swap(state.manifest, manifest, old, new)
        return changes is not None and adapter_swap.swap(state.replicas, *changes)

    def _replaced(
        self,
        name: str,
        manifest: dict[str, Any],
        revision: int,
        old: AppState | None,
        chosen: serving_plan.Plan,
        adapter_pins: dict[str, dict[str, str]] | None = None,
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
            # own are its Launch's, recorded when a replica starts (replica_start.py).
            model_id=name,
            download=chosen.download.as_dict() if chosen.download else None,
            task=chosen.task,
            why=chosen.why,
            adapter_pins=adapter_pins or {},
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
        with self._gpus.book(None, state) as book:
            self._terminate(state.replicas)
            state.replicas, state.stopped, state.stopped_at = [], why, now_iso()
            self._gpus.record(book, state)
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

    def _start_one(self, state: AppState, index: int, port: int, gpus: str | None) -> Replica:
        replica, popen = replica_start.start_one(
            state,
            index,
            port,
            gpus,
            folder=self._dir(state.name),
            log_path=self._log(state.name, index),
            template=self.template,
            token=lambda: self._token(state.name),
            storage=lambda: self._storage(state.name),
        )
        if popen is not None:
            self._children[popen.pid] = popen  # its exit code, and reaping
        return replica

    # --- status --------------------------------------------------------------------------

    def _status(self, state: AppState) -> LocalStatus:
        live = [r for r in state.replicas if r.exited_at is None]
        warmed = [r.warmed for r in live]
        ready = (
            replica_status.probe(state, live, self.probe_timeout) if state.stopped is None else {}
        )
        if [r.warmed for r in live] != warmed:
            self._save(state)
        exited = next((r for r in state.replicas if r.exited_at is not None), None)
        lines = []
        if exited:
            token = self._token(state.name)
            lines = replica_status.quoted_lines(self._log(state.name, exited.index), token)
        downloading = {
            r.index: replica_status.progress(self._log(state.name, r.index))
            for r in live
            if state.download is not None and r.pid is not None and replica_status.downloading(r)
        }
        return derive_status(state, ready, lines, downloading)
