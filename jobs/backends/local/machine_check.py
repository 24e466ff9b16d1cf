"""What this machine must have before the local backend can run a manifest, as refusals.

Each refusal is a Problem of origin target that names the manifest field it is about (or
none: this machine itself lacks something), so the dry run routes it without reading its words.

The local backend runs vLLM's OpenAI server (or the configured stand-in) as processes here,
on the CPU or on this machine's NVIDIA GPUs; without vLLM, the CPU runtimes (runtimes.py), on
model folders and on hf:// models they download. This machine's free memory and disk are
read here too (cgroup-aware), for the refusals that compare them with what a model needs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from jobs.backends.base import target_answer
from jobs.machine_catalog import GpuReading, MachineReadings, describe_machine, machine_catalog
from jobs.manifest.problems import Problem
from jobs.manifest.quantity import format_cpu, parse_bytes, parse_cpu
from jobs.manifest.view import dig
from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.folders import MODELS_DIR_SETTING, configured_models_dir

from . import download_files, serving_plan
from . import download_space as space
from . import runtimes as rt
from .command import (
    DEFAULT_TEMPLATE,
    EXTRA_ARGS_PATH,
    TEMPLATE_SETTING,
    TemplateError,
    extra_args_refusals,
    gpus_per_replica,
    on_gpu,
    replica_count,
    split_template,
)

VLLM_RUNTIME = "vllm"
VLLM_MISSING = "vLLM is not installed on this machine; install it or use a Kubernetes profile"
NVIDIA_SMI = "nvidia-smi"
NVIDIA_SMI_TIMEOUT = 10.0
_GPU_LINE = re.compile(r"^GPU (\d+):", re.MULTILINE)
MODEL = "spec.source.model"
MEMINFO = Path("/proc/meminfo")
GIB = 2**30
CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_MEMORY_CURRENT = Path("/sys/fs/cgroup/memory.current")


@dataclass(frozen=True)
class Machine:
    """What this machine has for model servers: usable cores and memory in bytes."""

    cores: int
    memory: int


def machine() -> Machine:
    """This machine's cores (those this process may run on) and memory (MemTotal, or the
    cgroup's limit when lower), read each time: a container may be resized."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return Machine(cores=max(1, cores), memory=_memory_bytes())


def _memory_bytes() -> int:
    total = 0
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        total = 0
    if not total:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 0
    try:
        limit = CGROUP_MEMORY_MAX.read_text().strip()
        if limit.isdigit() and 0 < int(limit) < (total or int(limit) + 1):
            total = int(limit)
    except OSError:
        pass
    return total


def free_memory() -> int:
    """Memory a new model server can take now: MemAvailable, or what the cgroup's limit leaves
    (memory.max less memory.current) when that is less. Read each time."""
    available = 0
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        available = 0
    if not available:
        available = _memory_bytes()
    try:
        limit = CGROUP_MEMORY_MAX.read_text().strip()
        used = CGROUP_MEMORY_CURRENT.read_text().strip()
        if limit.isdigit() and used.isdigit():
            available = min(available, max(0, int(limit) - int(used)))
    except OSError:
        pass
    return available


def _existing(folder: Path) -> Path:
    """`folder`, or the nearest folder above it that exists."""
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_disk(folder: Path) -> int:
    """Bytes free for this process on the file system that holds `folder` (or would)."""
    try:
        return shutil.disk_usage(_existing(folder)).free
    except OSError:
        return 0


def downloads_reserve(downloads: Path) -> int:
    """The free disk the downloads folder keeps (SERVEDECK_DOWNLOADS_RESERVE, checked at the
    console's start; by default the larger of 5 GiB and 10% of its file system)."""
    folder = _existing(downloads)
    try:
        total = shutil.disk_usage(folder).total
    except OSError:
        total = 0
    return download_files.reserve_bytes(rt.configured_text(download_files.RESERVE_SETTING), total)


def download_refusals(chosen: serving_plan.Plan) -> list[Problem]:
    """Refused when the files an hf:// model's CPU runtime downloads are more than this
    machine's memory (which must hold the weights), or do not fit the free disk of the
    downloads folder less its reserve and what downloads under way have reserved (what is
    there already is not counted again). The download launcher decides the same again,
    under the downloads folder's lock, when it starts."""
    if chosen.download is None:
        return []
    what = chosen.download.shown
    too_big = download_files.download_size_refusal(chosen.download.bytes, machine().memory, what)
    if too_big is not None:
        return [target_answer(too_big, MODEL + ".uri")]
    folder = Path(chosen.model)
    needed = sum(size for name, size in chosen.download.files if not (folder / name).is_file())
    downloads = rt.configured_downloads_dir()
    snapshot = (chosen.download.repo, chosen.download.commit)
    held = space.held_by_others(space.live_reservations(downloads), snapshot)
    message = download_files.disk_refusal(
        needed, free_disk(downloads), downloads, what, downloads_reserve(downloads), held
    )
    return [target_answer(message)] if message and needed else []


def capacity_refusals(manifest: Mapping[str, Any], here: Machine | None = None) -> list[Problem]:
    """Refused when minReplicas model servers do not fit on this machine: the local backend
    starts every one of them at once. Each needs its resources.memory and, on the CPU, its
    resources.cpu (on a GPU, one core: the CPU figure is a Kubernetes request). One replica
    is never refused here: the cap is on how many."""
    here = here or machine()
    model = dig(manifest, "spec", "source", "model")
    if not isinstance(model, Mapping):
        return []
    try:
        replicas = replica_count(manifest)
        cpu_text = str(dig(model, "resources", "cpu") or "1")
        memory_text = str(dig(model, "resources", "memory") or "1Gi")
        cpu = Fraction(1) if on_gpu(manifest) else parse_cpu(cpu_text)
        memory = parse_bytes(memory_text)
    except (ValueError, TypeError):
        return []  # the manifest rules name a bad quantity at its field
    if replicas <= 1:
        return []
    by_cores = int(Fraction(here.cores) / cpu) if cpu > 0 else replicas
    by_memory = here.memory // memory if memory > 0 and here.memory else replicas
    fits = max(1, min(by_cores, by_memory))
    if replicas <= fits:
        return []
    shown = replicas if replicas < 10**6 else f"{replicas:.3g}"
    per_replica = f"{format_cpu(cpu)} CPU and {memory_text} of memory"
    message = (
        f"{MODEL}.scaling.minReplicas is {shown}: the local backend would start that many model "
        f"servers at once on this machine, which has {here.cores} core(s) and "
        f"{here.memory / GIB:.1f} GiB of memory; at {per_replica} per replica it holds {fits}. "
        f"Set scaling.minReplicas to {fits} or less (or lower resources.cpu or "
        "resources.memory), or use a Kubernetes profile."
    )
    return [target_answer(message, f"{MODEL}.scaling.minReplicas")]


def search_path() -> str:
    """PATH, plus the directory of the console's own Python: vLLM installed into the console's
    virtualenv is found even when that virtualenv is not activated."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    venv_bin = os.path.dirname(sys.executable)
    if venv_bin not in parts:
        parts.append(venv_bin)
    return os.pathsep.join(parts)


def which(program: str) -> str | None:
    """The executable's full path, searched on search_path() (or as given, when a path)."""
    return shutil.which(program, path=search_path())


def parse_gpu_list(text: str) -> list[int]:
    """GPU indices from `nvidia-smi -L` ("GPU 0: NVIDIA L4 (UUID: GPU-...)")."""
    return [int(index) for index in _GPU_LINE.findall(text)]


def list_gpus() -> tuple[list[int], str | None]:
    """This machine's NVIDIA GPU indices, and why none could be listed (None when listed)."""
    program = which(NVIDIA_SMI)
    if program is None:
        return [], f"{NVIDIA_SMI} is not on the console host's PATH"
    try:
        result = subprocess.run(
            [program, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"{program} -L could not run ({exc})"
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return [], f"{program} -L failed: {detail[-1] if detail else f'exit {result.returncode}'}"
    return parse_gpu_list(result.stdout), None


GPU_QUERY = ("--query-gpu=name,memory.total", "--format=csv,noheader,nounits")


def parse_gpu_query(text: str) -> tuple[GpuReading, ...]:
    """GPUs from `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`
    ("NVIDIA L4, 23034" a line, memory in MiB); lines that are not such a pair are skipped."""
    gpus = []
    for line in text.splitlines():
        product, _, memory = line.rpartition(",")
        memory = memory.strip()
        if product.strip() and memory.isdigit():
            gpus.append(GpuReading(product.strip(), int(memory)))
    return tuple(gpus)


def read_gpus() -> tuple[tuple[GpuReading, ...], str | None]:
    """This machine's NVIDIA GPUs with their memory, and why none could be read (None when
    read: a machine without nvidia-smi has no GPU the local backend can use)."""
    program = which(NVIDIA_SMI)
    if program is None:
        return (), f"{NVIDIA_SMI} is not on the console host's PATH"
    try:
        result = subprocess.run(
            [program, *GPU_QUERY], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"{program} could not run ({exc})"
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return (), f"{program} failed: {detail[-1] if detail else f'exit {result.returncode}'}"
    return parse_gpu_query(result.stdout), None


def read_machine() -> tuple[MachineReadings, str | None]:
    """This machine as the local profile's catalog is made from it (jobs.machine_catalog), and why
    its GPUs could not be read, if they could not."""
    here = machine()
    gpus, problem = read_gpus()
    return MachineReadings(cores=here.cores, memory_bytes=here.memory, gpus=gpus), problem


def discovered_catalog() -> tuple[list[dict], str]:
    """A local profile's machine catalog made from this machine now, and what was read, in
    words ("2 cores, 7.7 GiB of memory, no GPU (...)"): bootstrap, the profile page and
    `profile discover` all make it here."""
    readings, problem = read_machine()
    return machine_catalog(readings), describe_machine(readings, problem)


def check(
    manifest: Mapping[str, Any],
    template: str | None = None,
    token: str | None = None,
    storage: Credentials | None = ANONYMOUS,
) -> list[Problem]:
    """Why the local backend cannot run this filled-in manifest here; empty when it can.
    `token`: the profile's Hugging Face token, for an hf:// model read from the Hub;
    `storage`: its storage credentials, for a bucket folder (None: not usable now)."""
    template = template if template is not None else DEFAULT_TEMPLATE
    refusals = _manifest_refusals(manifest, default_template=template == DEFAULT_TEMPLATE)
    chosen = serving_plan.plan(manifest, template, token, storage) if not refusals else None
    plan_refusals = []
    if isinstance(chosen, serving_plan.Refused):
        plan_refusals.append(target_answer(chosen.message, chosen.field))
    elif isinstance(chosen, serving_plan.Plan):
        plan_refusals += download_refusals(chosen)
    # GPUs are counted only for a manifest this backend could otherwise run.
    wants_gpu = dig(manifest, "spec", "source", "model", "resources", "accelerator")
    gpu_refusals = _gpu_refusals(manifest) if wants_gpu and not refusals else []
    capacity = capacity_refusals(manifest) if not refusals else []
    if plan_refusals:
        # No GPU is asked of a CPU runtime: its refusal already says what resources.accelerator
        # needs.
        return refusals + capacity + plan_refusals
    # A CPU runtime chosen (or refused) above needs no vLLM; the command is vLLM's otherwise.
    uri = dig(manifest, "spec", "source", "model", "uri")
    vllm_run = (
        template != DEFAULT_TEMPLATE
        or (chosen is None and not str(uri).startswith("file://"))
        or (isinstance(chosen, serving_plan.Plan) and chosen.runtime == VLLM_RUNTIME)
    )
    commands = _command_refusals(template) if vllm_run else []
    return refusals + capacity + commands + gpu_refusals


def _manifest_refusals(manifest: Mapping[str, Any], default_template: bool) -> list[Problem]:
    if dig(manifest, "spec", "source", "type") == "YAML":
        message = (
            "spec.source.type is YAML: the local backend cannot run a raw InferenceService; "
            "describe the model under spec.source.model, or use a Kubernetes profile."
        )
        return [target_answer(message, "spec.source.type")]
    model = dig(manifest, "spec", "source", "model")
    if not isinstance(model, Mapping):
        return [
            target_answer(f"{MODEL} is missing: the local backend needs a model to run.", MODEL)
        ]
    refusals: list[Problem] = []

    def refuse(about: str, message: str) -> None:
        refusals.append(target_answer(f"{about} {message}", about))

    fmt = model.get("format")
    if fmt != "vLLM":
        refuse(
            f"{MODEL}.format",
            f"is {fmt}: the local backend serves vLLM-format models only; "
            f"use a Kubernetes profile (KServe) to serve {fmt} models.",
        )
    engine = dig(model, "runtime", "engine")
    if fmt == "vLLM" and engine != "vllm" and default_template:
        refuse(
            f"{MODEL}.runtime.engine",
            f"is {engine}: the local backend runs the vllm runtime only; "
            "remove runtime.engine, or use a Kubernetes profile that has that runtime.",
        )
    if dig(model, "runtime", "isolation") == "VirtualMachine":
        refuse(
            f"{MODEL}.runtime.isolation",
            "is VirtualMachine: the local backend runs processes, not "
            "virtual machines; use Container, or a Kubernetes profile with KubeVirt.",
        )
    refusals += [target_answer(text, EXTRA_ARGS_PATH) for text in extra_args_refusals(manifest)]
    uri = model.get("uri")
    local_schemes = ("hf://", "file://", "s3://", "gs://", "https://")  # https: Azure Blob
    if not (isinstance(uri, str) and uri.startswith(local_schemes)):
        refuse(
            f"{MODEL}.uri",
            f"is {uri}: the local backend serves hf:// models and s3://, gs:// and Azure Blob "
            "folders (the replica downloads them) and file:// folders under its models folder; "
            "use a Kubernetes profile for other storage.",
        )
    nodes = dig(model, "resources", "nodesPerReplica") or 1
    if nodes > 1:
        refuse(
            f"{MODEL}.resources.nodesPerReplica",
            f"is {nodes}: the local backend runs on this one "
            "machine; set it to 1, or use a Kubernetes profile for multi-node replicas.",
        )
    vendor = dig(model, "resources", "accelerator", "gpu", "vendor")
    if vendor not in (None, "nvidia"):
        refuse(
            f"{MODEL}.resources.accelerator.gpu.vendor",
            f"is {vendor}: the local backend runs vLLM "
            "on NVIDIA GPUs only; use nvidia, or a Kubernetes profile.",
        )
    return refusals


def _command_refusals(template: str) -> list[Problem]:
    try:
        program = split_template(template)[0]
    except TemplateError as exc:
        return [target_answer(str(exc))]
    if which(program) is not None:
        return []
    if template == DEFAULT_TEMPLATE:
        return [
            target_answer(
                f"{VLLM_MISSING} (vllm is not on the console host's PATH nor in its virtualenv). "
                "Without vLLM the local backend serves hf:// models and model folders on disk "
                f"with its CPU runtimes: put the model's folder under {configured_models_dir()} "
                f"({MODELS_DIR_SETTING}) and set {MODEL}.uri to file://<that folder>."
            )
        ]
    message = (
        f"The local model server command {program!r} ({TEMPLATE_SETTING}) is not installed "
        f"(not on the console host's PATH); install it or correct {TEMPLATE_SETTING}."
    )
    return [target_answer(message)]


def _gpu_refusals(manifest: Mapping[str, Any]) -> list[Problem]:
    per_replica = gpus_per_replica(manifest)
    replicas = replica_count(manifest)
    needed = per_replica * replicas
    gpus, problem = list_gpus()
    where = f"{MODEL}.resources.accelerator.gpu.countPerReplica"
    if problem is not None:
        message = (
            f"{where} asks for {per_replica} NVIDIA GPU(s) per replica, but no NVIDIA GPU can be "
            f"used on this machine: {problem}. Remove resources.accelerator to run on the CPU, "
            "or use a Kubernetes profile with GPU nodes."
        )
        return [target_answer(message, where)]
    if len(gpus) < needed:
        message = (
            f"{where} is {per_replica} for {replicas} replica(s), {needed} GPU(s) in all, and "
            f"this machine has {len(gpus)}; lower countPerReplica or scaling.minReplicas, or "
            "use a Kubernetes profile with GPU nodes."
        )
        return [target_answer(message, where)]
    return []
