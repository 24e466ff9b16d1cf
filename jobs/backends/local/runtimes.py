"""Which model server the local backend runs a model with, and the CPU runtimes' command lines.

vLLM for a replica that asks for a GPU, where it is installed; else an OpenAI-compatible CPU
server chosen by the model's task and weights layout, each in its own virtualenv under the
runtimes folder (made by scripts/cpu_runtimes.sh): vLLM's CPU build for chat and for text
embeddings wherever this CPU and the model's architecture allow it (vllm_cpu.py), transformers
serve and infinity-emb otherwise. Decisions on plain values; the only reads of the machine are
configured_runtimes_dir() and installed_runtimes(), kept apart for the caller.
Which files of an hf:// model a CPU runtime downloads, and where, is download_files.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

try:
    from . import vllm_cpu as vc
except ImportError:  # run by path, from the download launcher (download_files.py)
    import vllm_cpu as vc  # type: ignore[no-redef]

RUNTIMES_DIR_SETTING = "SERVEDECK_RUNTIMES_DIR"
# Where hf:// models served by a CPU runtime are downloaded to: one folder for the console,
# in the Hugging Face cache layout (models--<org>--<name>/snapshots/<commit>/).
DOWNLOADS_DIR_SETTING = "SERVEDECK_DOWNLOADS_DIR"
# This console's own copy, by its absolute path: a refusal's command works from any folder
# (the script changes into the console's folder itself).
INSTALL_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu_runtimes.sh"
# Written by the install script after a complete install: a venv without it is half made.
INSTALLED_STAMP = ".requirements.sha256"
LOOPBACK = "127.0.0.1"

# Tasks as models_catalog's Check model names them (CheckResult.task).
GENERATE, EMBED, SCORE, TRANSCRIBE = "generate", "embed", "score", "transcribe"
TASK_WORDS = {
    GENERATE: "chat and completions",
    EMBED: "embeddings",
    SCORE: "reranking",
    TRANSCRIBE: "transcription",
}
# How the weights are laid out on disk or in a Hub repository.
HF, CTRANSLATE2, GGUF, NEMO = "hf", "ctranslate2", "gguf", "nemo"
LAYOUT_WORDS = {
    HF: "a Hugging Face model folder (config.json and safetensors weights)",
    CTRANSLATE2: "a CTranslate2 checkpoint (model.bin)",
    GGUF: "a GGUF file",
    NEMO: "a NeMo checkpoint (.nemo)",
}
VLLM = "vllm"
PARAKEET_ARCHITECTURE = "ParakeetForTDT"
# transformers runs a mixture of experts on the CPU one expert at a time: above this many
# parameters held it answers too slowly to serve (and vLLM on GPUs is built for them).
CPU_MOE_MAX_PARAMETERS = 8 * 10**9
GPU_PROFILE = (
    "a Kubernetes profile with NVIDIA GPU nodes, or the local profile on a machine with vLLM "
    "and an NVIDIA GPU"
)
MAX_PROFILES_NAMED = 3  # a refusal names this many of the organisation's GPU profiles
# Every runtime: no usage reports leave the machine (infinity sends them by default).
QUIET_ENV = {
    "DO_NOT_TRACK": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "INFINITY_ANONYMOUS_USAGE_STATS": "0",
    "PYTHONUNBUFFERED": "1",  # log lines reach the replica's log as they are written
}
# A model read from a folder never asks the Hub for anything.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class CpuRuntime:
    """One CPU model server: its virtualenv's name, program, what it serves and its routes."""

    name: str  # as states and pages name it; also its folder unless `venv` says otherwise
    label: str
    program: str  # in the venv's bin/
    serves: frozenset[tuple[str, str]]  # (task, layout) pairs
    readiness_path: str  # answers 200 once the server accepts requests
    route_prefix: str  # where its OpenAI-style routes start
    package: str  # the distribution installed in its venv (its version is shown on pages)
    venv: str = ""  # the folder under the runtimes dir and the install script's argument

    @property
    def folder(self) -> str:
        return self.venv or self.name


TRANSFORMERS = CpuRuntime(
    "transformers",
    "transformers serve",
    "transformers",
    # Not transcription: its /v1/audio/transcriptions needs torchcodec or soundfile to decode
    # audio, which transformers[serving] does not install, and no Whisper folder here tried it.
    frozenset({(GENERATE, HF)}),
    "/health",
    "/v1",
    "transformers",
)
INFINITY = CpuRuntime(
    "infinity",
    "infinity-emb",
    "infinity_emb",
    frozenset({(EMBED, HF), (SCORE, HF)}),
    "/health",  # at the root: --url-prefix moves only the model routes
    "/v1",
    "infinity-emb",
)
FASTER_WHISPER = CpuRuntime(
    "faster-whisper",
    "faster-whisper-server",
    "faster-whisper-server",
    frozenset({(TRANSCRIBE, CTRANSLATE2)}),
    "/health",
    "/v1",
    "faster-whisper-server",
)
VLLM_CPU = CpuRuntime(
    vc.NAME,
    "vLLM's CPU build",
    "python",  # python -m vllm.entrypoints.openai.api_server (vllm_cpu.MODULE)
    # Embeddings on its pooling runner: faster than infinity-emb at 1, 4 and 16 concurrent
    # requests on the packaged all-MiniLM-L6-v2 (bench/pooling_runtimes_bench.py).
    frozenset({(GENERATE, HF), (EMBED, HF)}),
    "/health",  # 200 only once the engine is compiled, warmed up and listening
    "/v1",
    vc.PACKAGE,
    vc.VENV,
)
CPU_RUNTIMES = {r.name: r for r in (TRANSFORMERS, INFINITY, FASTER_WHISPER, VLLM_CPU)}


@dataclass(frozen=True)
class ModelFacts:
    """What the choice depends on, as Check model and the manifest know it."""

    task: str  # generate | embed | score | transcribe
    layout: str  # hf | ctranslate2 | gguf | nemo
    architecture: str | None = None
    parameters: int | None = None
    experts: int | None = None  # routed experts per MoE layer; None or 1 for a dense model
    wants_gpu: bool = False  # resources.accelerator is set
    # Why infinity may not be given the model's files (model_files.refusal): classes they name
    # that its loader would import and run. None when they name none but the accepted ones.
    files_refusal: str | None = None


@dataclass(frozen=True)
class Choice:
    """The runtime a model gets here: "vllm" (command.py builds its argv) or a CPU runtime."""

    runtime: str
    why: str  # one sentence for Check model: "... on this machine because ..."

    @property
    def cpu(self) -> CpuRuntime | None:
        return CPU_RUNTIMES.get(self.runtime)


@dataclass(frozen=True)
class Refusal:
    """Why no runtime here serves the model, and what to do; `install` is the exact command
    when only an install is missing."""

    message: str
    install: str | None = None


@dataclass(frozen=True)
class Launch:
    """How to start one replica of a CPU runtime: no shell, loopback only, telemetry off."""

    runtime: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    readiness_path: str
    route_prefix: str
    # The model name the runtime answers to; the gateway sends it in place of the client's.
    model_id: str


def weights_layout(file_names: Iterable[str]) -> str | None:
    """The layout of a model folder or repository from its file names (relative paths);
    None when no layout is recognised. Safetensors win over a GGUF copy beside them."""
    names = {PurePath(n).name for n in file_names}
    if "config.json" in names and any(n.endswith(".safetensors") for n in names):
        return HF
    if "model.bin" in names and ("vocabulary.txt" in names or "vocabulary.json" in names):
        return CTRANSLATE2
    if any(n.endswith(".nemo") for n in names):
        return NEMO
    if any(n.endswith(".gguf") for n in names):
        return GGUF
    if "config.json" in names and "pytorch_model.bin" in names:
        return HF  # older checkpoints; transformers and infinity read them too
    return None


def memory_refusal(needed: int, available: int, what: str) -> tuple[str, str] | None:
    """(why, what to do) when a replica of `what` needing `needed` bytes (cpu_replica_bytes)
    does not fit the `available` memory of this machine (its free memory, or what its cgroup
    leaves); None when it fits. The one decision: Check model makes it, the dry run says it."""
    if needed <= available:
        return None
    return (
        f"{what} needs {size_text(needed)} of memory on this machine's CPU (weights, runtime "
        f"and KV cache), and {size_text(available)} is free here.",
        "Stop other models or programs to free memory, lower serving.maxContextTokens or "
        "serving.maxConcurrentRequests, pick a smaller model, or use a profile with GPUs.",
    )


def size_text(n: int) -> str:
    """Bytes as every page writes them (models_catalog.sizing.human_bytes): one decimal in the
    largest binary unit reached; kept here so the download launcher starts without Django."""
    for size, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if round(n / size, 1) >= 1:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def install_command(runtime: str, runtimes_dir: str | os.PathLike[str]) -> str:
    """The command that installs `runtime` where this console looks for it: both paths
    absolute (a relative runtimes folder is the console's, from its working folder), so it
    can be pasted into a shell in any folder. The install script's own retry line is the same."""
    folder = shlex.quote(os.path.abspath(runtimes_dir))
    return f"{RUNTIMES_DIR_SETTING}={folder} {shlex.quote(str(INSTALL_SCRIPT))} {runtime}"


def _task_words(task: str) -> str:
    return TASK_WORDS.get(task, f"the task {task!r}")


def gpu_profile_words(gpu_profiles: Sequence[str] = ()) -> str:
    """Where a model no CPU runtime serves would run, as the end of a sentence: the
    organisation's profiles that hold it by name (the caller finds them: Kubernetes profiles
    with an NVIDIA GPU kind that fits), else the kind of profile that would."""
    if not gpu_profiles:
        return f"use {GPU_PROFILE}"
    shown = [f"profile {name}" for name in gpu_profiles[:MAX_PROFILES_NAMED]]
    more = len(gpu_profiles) - len(shown)
    if more:
        shown.append(f"{more} more of this organisation's GPU profiles")
    named = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
    return f"deploy it to {named}, whose NVIDIA GPUs hold it"


def choose_runtime(
    facts: ModelFacts,
    *,
    vllm_installed: bool,
    installed: Collection[str] = (),
    runtimes_dir: str | os.PathLike[str] = "var/runtimes",
    gpu_profiles: Sequence[str] = (),
    vllm_cpu: vc.Here | None = None,
) -> Choice | Refusal:
    """The runtime for this model on this machine, or a refusal that says what would serve it.

    vLLM serves a replica that asks for a GPU (resources.accelerator), and only one: the vLLM
    pip installs is a CUDA build, which serves nothing on the CPU, so a replica without a GPU
    runs on the CPU runtime of its task and layout wherever vLLM is installed. `installed`
    names the CPU runtimes whose virtualenv is complete (installed_runtimes()); `gpu_profiles`
    the organisation's profiles that would serve a model no CPU runtime serves; `vllm_cpu`
    what vLLM's CPU build can do here (None: it is left out, as before it existed). Chat and
    embeddings go to vLLM's CPU build where it can serve the model, else to transformers serve
    and infinity-emb."""
    elsewhere = gpu_profile_words(gpu_profiles)
    if facts.layout == NEMO or facts.architecture == PARAKEET_ARCHITECTURE:
        return Refusal(
            "Parakeet (NeMo) speech recognition runs only on the parakeet runtime, which "
            f"needs an NVIDIA GPU; no CPU runtime serves it. {_sentence(elsewhere)}, or on "
            "this machine use a Whisper model in CTranslate2 format (faster-whisper)."
        )
    layout = LAYOUT_WORDS.get(facts.layout, f"the layout {facts.layout!r}").split(" (")[0]
    if facts.wants_gpu:
        if vllm_installed and facts.layout == HF:
            return Choice(
                VLLM,
                "the replica asks for a GPU (resources.accelerator), and vLLM is installed on "
                "this machine.",
            )
        if vllm_installed:
            vllm, fix = f"vLLM does not load {layout}", "Remove"
        else:
            vllm, fix = "vLLM is not installed on this machine", "Install vLLM, remove"
        return Refusal(
            f"spec.source.model.resources.accelerator asks for a GPU, but {vllm} and the CPU "
            f"runtimes use no GPU. {fix} resources.accelerator to run on the CPU, or use a "
            "Kubernetes profile with GPU nodes."
        )
    moe = (facts.experts or 0) > 1
    if moe and (facts.parameters or 0) > CPU_MOE_MAX_PARAMETERS:
        held = f"{facts.parameters / 1e9:.0f}B" if facts.parameters else "many"
        return Refusal(
            f"{facts.architecture or 'This model'} is a mixture of experts ({facts.experts} "
            f"experts, {held} parameters held); no CPU runtime serves one above "
            f"{CPU_MOE_MAX_PARAMETERS // 10**9}B parameters at a usable speed. "
            f"{_sentence(elsewhere)}."
        )
    if (facts.task, facts.layout) == (EMBED, HF) and facts.files_refusal is not None:
        # Refused for either runtime: files naming classes the check does not accept could
        # also make vLLM's pooling answer other vectors than the model's own code would.
        return Refusal(facts.files_refusal)
    if (facts.task, facts.layout) in VLLM_CPU.serves and vllm_cpu is not None:
        return _on_vllm_cpu(facts, vllm_cpu, installed, runtimes_dir, vllm_installed)
    runtime = next(
        (
            r
            for r in CPU_RUNTIMES.values()
            if (facts.task, facts.layout) in r.serves and r is not VLLM_CPU
        ),
        None,
    )
    if runtime is None:
        return _no_cpu_runtime(facts, elsewhere)
    if runtime is INFINITY and facts.files_refusal is not None:
        return Refusal(facts.files_refusal)  # installing anything would not change it
    if runtime.name not in installed:
        return _not_installed(facts, runtime, runtimes_dir)
    why = _why_not_vllm(facts, vllm_installed)
    return Choice(runtime.name, f"{runtime.label} serves {_task_words(facts.task)}; {why}.")


def _why_not_vllm(facts: ModelFacts, vllm_installed: bool) -> str:
    """Why the GPU vLLM (on the PATH) does not serve this CPU replica, as a clause."""
    if not vllm_installed:
        return "vLLM is not installed on this machine"
    if facts.layout != HF:
        layout = LAYOUT_WORDS.get(facts.layout, f"the layout {facts.layout!r}").split(" (")[0]
        return f"vLLM does not load {layout}"
    return (
        "the replica asks for no GPU (no resources.accelerator), and the vLLM installed "
        "here serves on NVIDIA GPUs only"
    )


def _not_installed(facts: ModelFacts, runtime: CpuRuntime, runtimes_dir) -> Refusal:
    command = install_command(runtime.folder, runtimes_dir)
    return Refusal(
        f"{_task_words(facts.task).capitalize()} on this machine needs the CPU runtime "
        f"{runtime.label}, which is not installed in {runtimes_dir}. "
        f"Install it with: {command}",
        install=command,
    )


# What each task of vLLM's CPU build falls back to, and the words of its choice.
VLLM_CPU_FALLBACK = {GENERATE: TRANSFORMERS, EMBED: INFINITY}
VLLM_CPU_SERVES = {
    GENERATE: ("chat and completions", ""),
    EMBED: ("embeddings on its pooling runner", " for text embeddings"),
}


def _on_vllm_cpu(
    facts: ModelFacts,
    here: vc.Here,
    installed: Collection[str],
    runtimes_dir,
    vllm_installed: bool,
) -> Choice | Refusal:
    """Chat or embeddings from a Hugging Face folder without a GPU: vLLM's CPU build where it
    serves the model here, else the task's other runtime (transformers serve, infinity-emb),
    saying why not vLLM."""
    fallback = VLLM_CPU_FALLBACK[facts.task]
    serves, what = VLLM_CPU_SERVES[facts.task]
    why_not = here.why_not(facts.architecture, install_command(vc.VENV, runtimes_dir), facts.task)
    if why_not is None:
        return Choice(
            VLLM_CPU.name,
            f"{VLLM_CPU.label} (vLLM {here.installed}) serves {serves}: vLLM serves the "
            f"architecture {facts.architecture}{what}, and this CPU runs its "
            f"{here.instruction_set} kernels{_auto_dtype_words(here)}.",
        )
    if fallback.name in installed:
        return Choice(
            fallback.name,
            f"{fallback.label} serves {_task_words(facts.task)}; "
            f"{_why_not_vllm(facts, vllm_installed)}, and not {VLLM_CPU.label}, as {why_not}.",
        )
    # Neither: install the one that would serve it here.
    served = here.embedding_architectures if facts.task == EMBED else here.architectures
    fits = here.unfit is None and not here.off and facts.architecture in served
    return _not_installed(facts, VLLM_CPU if fits else fallback, runtimes_dir)


def _auto_dtype_words(here: vc.Here) -> str:
    if here.auto_dtype is None:
        return ""
    return (
        f" (engine.dtype auto serves in {here.auto_dtype} here: this CPU has no bfloat16 "
        "instructions, and vLLM's bfloat16 without them is many times slower; the weights then "
        "take 4 bytes each)"
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _no_cpu_runtime(facts: ModelFacts, elsewhere: str) -> Refusal:
    layout = LAYOUT_WORDS.get(facts.layout, f"the layout {facts.layout!r}")
    served = [
        f"{_task_words(task)} from {LAYOUT_WORDS[lay].split(' (')[0]}"
        for r in CPU_RUNTIMES.values()
        if r is not VLLM_CPU  # the same as transformers serve's and infinity's
        for task, lay in sorted(r.serves)
    ]
    if facts.layout == GGUF:
        fix = (
            "Point the source at the original model's Hugging Face folder or repository "
            "(safetensors weights): vLLM and transformers read those."
        )
    elif facts.task == TRANSCRIBE:
        fix = (
            "On this machine use a Whisper model in CTranslate2 format (faster-whisper's, such "
            f"as Systran/faster-whisper-tiny.en), or {elsewhere}."
        )
    else:
        fix = f"{_sentence(elsewhere)}."
    return Refusal(
        f"No CPU runtime serves {_task_words(facts.task)} from {layout}; the CPU runtimes "
        f"serve {', '.join(served)}. {fix}"
    )


def cpu_launch(
    runtime: str,
    *,
    model: str,
    name: str,
    port: int,
    runtimes_dir: str | os.PathLike[str],
    revision: str | None = None,
    max_concurrent: int | None = None,
    engine_args: Sequence[str] = (),
    engine_env: Mapping[str, str] | None = None,
    task: str = GENERATE,
) -> Launch:
    """The command of one CPU runtime replica serving `model` (a folder's absolute path, or a
    Hugging Face repo id) as `name` on 127.0.0.1:`port`; `max_concurrent` is the manifest's
    serving.maxConcurrentRequests. vLLM's CPU build also takes the manifest's `engine_args`
    (command.engine_args), `engine_env` (vllm_cpu.environment) and the model's `task` (its
    runner: an embedding model on the pooling one)."""
    spec = CPU_RUNTIMES[runtime]
    program = str(Path(runtimes_dir) / spec.folder / "bin" / spec.program)
    folder = os.path.isabs(model)
    env = {**QUIET_ENV, **(OFFLINE_ENV if folder else {})}
    port_text = str(port)
    cwd: str | None = None
    if spec is TRANSFORMERS:
        # transformers serve names a model by how it was given: a folder is served as its own
        # name from its parent folder, so the id clients must send carries no path.
        model_arg, model_id = model, model
        if folder:
            cwd, model_arg = str(Path(model).parent), Path(model).name
            model_id = model_arg
        argv = [program, "serve", "--host", LOOPBACK, "--port", port_text, "--device", "cpu"]
        if (max_concurrent or 1) > 1:
            # Without it transformers serve answers one request at a time and the rest queue;
            # with it 2 and 4 concurrent chats shared the CPU (bench/cpu_runtimes_bench.py).
            argv.append("--continuous-batching")
        pinned = model_arg if revision is None else f"{model_arg}@{revision}"
        argv += ["--log-level", "info", pinned]
    elif spec is VLLM_CPU:
        argv = vc.argv(program, model, name, port, LOOPBACK, engine_args, task)
        env.update(engine_env or {})
        model_id = name
    elif spec is INFINITY:
        argv = [program, "v2", "--model-id", model, "--served-model-name", name]
        if revision is not None:
            argv += ["--revision", revision]
        argv += ["--engine", "torch", "--device", "cpu", "--host", LOOPBACK, "--port", port_text]
        # Its routes sit at the root unless given a prefix; /v1 keeps one surface with the rest.
        argv += ["--url-prefix", spec.route_prefix, "--no-bettertransformer"]
        # Its warm-up times a 256-token batch before it is ready: 17 s of a small CPU for
        # figures only its own log shows.
        argv.append("--no-model-warmup")
        # It trusts a model's own Python code (config.json's auto_map) by default: a folder's
        # code must not run on the console's machine, whoever put it there.
        argv.append("--no-trust-remote-code")
        model_id = name
    else:
        # faster-whisper-server loads the model on the first request, not at start.
        argv = [program, model, "--host", LOOPBACK, "--port", port_text, "--log-level", "info"]
        model_id = name
    return Launch(
        runtime=spec.name,
        argv=argv,
        env=env,
        cwd=cwd,
        readiness_path=spec.readiness_path,
        route_prefix=spec.route_prefix,
        model_id=model_id,
    )


# ---- the machine's side: where the venvs are and which are complete ----


def configured_folder(
    setting: str, subfolder: str, environ: Mapping[str, str] | None = None
) -> Path:
    """A folder the operator configures: Django's setting of that name, else the environment
    variable, else `subfolder` of the console's var folder. Read without Django too (bench
    scripts), so its settings are asked only when they are configured."""
    value, var_dir = None, None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, setting, None)
            var_dir = getattr(settings, "VAR_DIR", None)
    except ImportError:
        pass
    environ = os.environ if environ is None else environ
    value = value or environ.get(setting, "").strip()
    if value:
        return Path(value)
    if var_dir is None:
        var_dir = Path(environ.get("SERVEDECK_VAR_DIR") or Path(__file__).parents[3] / "var")
    return Path(var_dir) / subfolder


def configured_text(setting: str, environ: Mapping[str, str] | None = None) -> str:
    """A setting's text: Django's setting of that name when configured, else the environment
    variable, else empty. Read without Django too (the launcher's plan is written with it)."""
    value = None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, setting, None)
    except ImportError:
        pass
    environ = os.environ if environ is None else environ
    return str(value if value is not None else environ.get(setting, "")).strip()


def configured_downloads_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where hf:// models served by the CPU runtimes are downloaded (one for the console)."""
    return configured_folder(DOWNLOADS_DIR_SETTING, "downloads", environ)


def configured_runtimes_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the CPU runtimes' virtualenvs are (scripts/cpu_runtimes.sh puts them there)."""
    return configured_folder(RUNTIMES_DIR_SETTING, "runtimes", environ)


def installed_runtimes(runtimes_dir: str | os.PathLike[str]) -> frozenset[str]:
    """The CPU runtimes whose virtualenv under runtimes_dir has its program and the install
    script's mark of a complete install."""
    found = set()
    for spec in CPU_RUNTIMES.values():
        venv = Path(runtimes_dir) / spec.folder
        program = venv / "bin" / spec.program
        if (venv / INSTALLED_STAMP).is_file() and os.access(program, os.X_OK):
            found.add(spec.name)
    return frozenset(found)


def _distribution_key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()  # as wheel and dist-info names spell it


def installed_version(runtime: str, runtimes_dir: str | os.PathLike[str]) -> str | None:
    """The version of the runtime's package in its virtualenv, from its .dist-info folder's
    name (nothing is imported or run); None when it is not found there."""
    spec = CPU_RUNTIMES.get(runtime)
    if spec is None:
        return None
    wanted = _distribution_key(spec.package)
    for info in (Path(runtimes_dir) / spec.folder / "lib").glob(
        "python*/site-packages/*.dist-info"
    ):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        if _distribution_key(name) == wanted and version:
            return version
    return None


def vllm_installed() -> bool:
    """Whether vLLM's server is on the PATH or in the console's own virtualenv (installed
    there, it is found even when that virtualenv is not activated)."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    parts.append(os.path.dirname(sys.executable))
    return shutil.which(VLLM, path=os.pathsep.join(parts)) is not None
