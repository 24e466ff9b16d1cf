"""The command line and environment of one local model server, from a filled-in manifest.

Pure functions: the argv is built token by token from a template split with shlex, so a value
from the manifest is always one argument and never passes through a shell.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from console.env import configured_engine_flags
from jobs.backends.redaction import SECRET_WORDS
from jobs.manifest.adapters import RUNTIME_UPDATING_ENV, lora_args, names
from jobs.manifest.engine_flags import check_engine_args
from jobs.manifest.quantity import parse_bytes
from jobs.manifest.uri import UriError, parse_uri
from jobs.render.engine import VLLM_MEDIA_ENV

TEMPLATE_SETTING = "SERVEDECK_LOCAL_COMMAND"
DEFAULT_TEMPLATE = (
    "vllm serve {model} --host 127.0.0.1 --port {port} --served-model-name {name} {args}"
)
# {engine_args} is the name the design notes use; both mean the engine arguments.
ARGS_TOKENS = ("{args}", "{engine_args}")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_VALUE_PLACEHOLDERS = ("model", "port", "name")
GIB = 2**30
EXTRA_ARGS_PATH = "spec.source.model.engine.extraArgs"
MODALITY_LIMITS = {
    "maxImagesPerPrompt": "image",
    "maxVideosPerPrompt": "video",
    "maxAudioClipsPerPrompt": "audio",
}


class TemplateError(ValueError):
    """SERVEDECK_LOCAL_COMMAND (or a template given in code) cannot be used; says why."""


def configured_template() -> str:
    """The command template: Django's SERVEDECK_LOCAL_COMMAND setting, else the environment
    variable, else vLLM's server. Read when called, so tests and settings changes apply."""
    value = None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, TEMPLATE_SETTING, None)
    except ImportError:  # the backend also runs without Django (bench scripts)
        value = None
    if not value:
        value = os.environ.get(TEMPLATE_SETTING, "")
    return value.strip() or DEFAULT_TEMPLATE


class EngineArgsRefused(ValueError):
    """Engine arguments vLLM would read as a flag the platform does not pass."""


def split_template(template: str) -> list[str]:
    """The template's tokens; raises TemplateError naming the setting when it cannot work."""
    try:
        tokens = shlex.split(template)
    except ValueError as exc:
        raise TemplateError(
            f"{TEMPLATE_SETTING}={template!r} cannot be split into arguments ({exc}); "
            "check its quotes."
        ) from None
    if not tokens:
        raise TemplateError(f"{TEMPLATE_SETTING} is empty; give the model server's command.")
    names = {m for token in tokens for m in _PLACEHOLDER.findall(token)}
    unknown = sorted(names - {*_VALUE_PLACEHOLDERS, "args", "engine_args"})
    if unknown:
        raise TemplateError(
            f"{TEMPLATE_SETTING}={template!r} has the unknown placeholder "
            f"{{{unknown[0]}}}; accepts {{model}}, {{port}}, {{name}} and {{args}}."
        )
    if "port" not in names:
        # Readiness is probed on the port we chose: a server on another port is never seen.
        raise TemplateError(
            f"{TEMPLATE_SETTING}={template!r} has no {{port}}; the server must listen on the "
            "port the console gives it. Add --port {port}."
        )
    return tokens


def _model(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    model = manifest.get("spec", {}).get("source", {}).get("model")
    if not isinstance(model, Mapping):
        raise ValueError("the manifest has no spec.source.model: the local backend runs only those")
    return model


def hf_model(manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    """The Hugging Face repo id and revision (None when the uri pins none), or a file://
    folder's path."""
    uri = _model(manifest).get("uri")
    try:
        info = parse_uri(uri) if isinstance(uri, str) else None
    except UriError:
        info = None
    if info is not None and info.file_path is not None:
        return info.file_path, None  # a folder on this machine (file://): no revision
    if info is None or info.hf_repo is None:
        raise ValueError(f"spec.source.model.uri {uri!r} is not an hf:// or file:// uri")
    return info.hf_repo, info.hf_revision


def on_gpu(manifest: Mapping[str, Any]) -> bool:
    accelerator = (_model(manifest).get("resources") or {}).get("accelerator") or {}
    return accelerator.get("gpu") is not None


def gpus_per_replica(manifest: Mapping[str, Any]) -> int:
    accelerator = (_model(manifest).get("resources") or {}).get("accelerator") or {}
    gpu = accelerator.get("gpu") or {}
    return int(gpu.get("countPerReplica") or 0)


def replica_count(manifest: Mapping[str, Any]) -> int:
    """minReplicas: the local backend has no autoscaler, so it runs the fewest replicas."""
    return int((_model(manifest).get("scaling") or {}).get("minReplicas") or 1)


def engine_args(manifest: Mapping[str, Any], adapters: Sequence[tuple[str, str]] = ()) -> list[str]:
    """vLLM's engine arguments for the manifest's engine and serving fields, then the LoRA
    flags of `adapters` ((name, folder) as resolved where they are used), extraArgs last."""
    model = _model(manifest)
    engine = model.get("engine") or {}
    serving = model.get("serving") or {}
    gpu = on_gpu(manifest)
    _, revision = hf_model(manifest)
    args: list[str] = []

    def add(flag: str, value: Any) -> None:
        if value is not None:
            args.extend([flag, str(value)])

    add("--revision", revision)
    add("--dtype", engine.get("dtype"))
    add("--quantization", engine.get("quantization"))
    add("--tensor-parallel-size", engine.get("tensorParallelSize"))
    if (engine.get("pipelineParallelSize") or 1) > 1:
        add("--pipeline-parallel-size", engine["pipelineParallelSize"])
    if gpu:
        add("--gpu-memory-utilization", engine.get("gpuMemoryUtilization"))
    add("--max-model-len", serving.get("maxContextTokens"))
    add("--max-num-seqs", serving.get("maxConcurrentRequests"))
    if gpu and serving.get("kvCacheSize") is not None:
        # Per GPU, as the manifest defines it; vLLM then ignores gpu-memory-utilization for it.
        add("--kv-cache-memory-bytes", parse_bytes(serving["kvCacheSize"]))
    add("--reasoning-parser", engine.get("reasoningParser"))
    extra = checked_extra_args(manifest)
    if engine.get("toolCallParser"):
        # A tool-call parser is only used when vLLM may choose tools itself.
        if "--enable-auto-tool-choice" not in extra:
            args.append("--enable-auto-tool-choice")
        add("--tool-call-parser", engine["toolCallParser"])
    limits = {
        MODALITY_LIMITS[key]: value
        for key, value in (serving.get("multimodal") or {}).items()
        if key in MODALITY_LIMITS and value is not None
    }
    if limits:
        add("--limit-mm-per-prompt", json.dumps(limits, separators=(",", ":")))
    return args + lora_args(adapters) + extra


def extra_args_refusals(manifest: Mapping[str, Any]) -> list[str]:
    """Why the filled-in engine.extraArgs cannot reach this machine's server (sentences).

    The dry run checks them too; this is the last guard where the process arguments are built,
    for manifests stored before that check or that reached the runner another way."""
    args = (_model(manifest).get("engine") or {}).get("extraArgs") or []
    if not isinstance(args, list):
        return [f"{EXTRA_ARGS_PATH} is not a list of arguments."]
    problems = check_engine_args(args, extra_flags=configured_engine_flags())
    return [f"{EXTRA_ARGS_PATH}[{index}]: {sentence}" for index, sentence in problems]


def checked_extra_args(manifest: Mapping[str, Any]) -> list[str]:
    refusals = extra_args_refusals(manifest)
    if refusals:
        raise EngineArgsRefused(" ".join(refusals))
    return [str(a) for a in (_model(manifest).get("engine") or {}).get("extraArgs") or []]


def local_command(
    manifest: Mapping[str, Any],
    port: int,
    template: str | None = None,
    model: str | None = None,
    adapters: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The argv of one replica's server: the template with {model} {port} {name} filled and
    {args} replaced by the engine arguments (each its own argument; no shell). `model` is what
    {model} becomes when the caller resolved it (a file:// folder, checked against the models
    folder: the server is given that folder, never the path as typed, whose links could be
    pointed elsewhere after the check); else the uri's repo id or path. `adapters`: the LoRA
    adapters' (name, folder), resolved likewise."""
    tokens = split_template(template if template is not None else DEFAULT_TEMPLATE)
    repo, _ = hf_model(manifest)
    values = {"model": model or repo, "port": str(port), "name": str(manifest["spec"]["name"])}
    argv: list[str] = []
    for token in tokens:
        if token in ARGS_TOKENS:
            argv.extend(engine_args(manifest, adapters))
        else:
            argv.append(_PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), token))
    return argv


def local_env(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Environment the server needs beyond the console's own (GPU devices are added by the
    runner, which knows which are free)."""
    env = {"PYTHONUNBUFFERED": "1"}  # log lines reach the log file as they are written
    # Media links: no redirects, no loopback or private addresses (other model servers listen
    # on this machine's loopback without a key), as on a cluster.
    env.update(VLLM_MEDIA_ENV)
    if names(manifest):  # its adapters may change without a restart (runner: adapter_swap)
        env.update(RUNTIME_UPDATING_ENV)
    kv_cache = (_model(manifest).get("serving") or {}).get("kvCacheSize")
    if not on_gpu(manifest) and kv_cache is not None:
        # vLLM's CPU build sizes its KV cache from this variable, in whole GiB.
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(parse_bytes(kv_cache) / GIB)))
    return env


# What a model server may see of the console's environment: an allowlist of its tools'
# settings (locale, proxies, CA bundles, vLLM, CUDA, Hugging Face's cache and mirror), never the
# console's secrets (SECRET_KEY, DATABASE_URL...) nor a token of the host's: the only token it
# gets is its own application's, given by the runner.
PASSED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
        "LD_LIBRARY_PATH", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
        "no_proxy", "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE",
        "HF_HUB_ENABLE_HF_TRANSFER", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT", "HF_XET_HIGH_PERFORMANCE",
    }
)  # fmt: skip
PASSED_PREFIXES = (
    "LC_", "VLLM_", "CUDA_", "NVIDIA_", "NCCL_", "TORCH", "TRITON_", "TRANSFORMERS_", "XDG_",
    "OMP_", "MKL_",
)  # fmt: skip


def _passed(name: str) -> bool:
    # Never passed, even under an allowed prefix (VLLM_API_KEY, NVIDIA_API_KEY...).
    if any(word in name.upper() for word in SECRET_WORDS):
        return False
    return name in PASSED_NAMES or name.startswith(PASSED_PREFIXES)


def server_environment(
    console_env: Mapping[str, str], extra: Mapping[str, str], hf_token: str | None = None
) -> dict[str, str]:
    """The environment a model server starts with: the allowed part of the console's, then
    `extra` (local_env and the GPUs the runner chose), then its own application's Hugging
    Face token when it has one. A token file saved on the host is never read."""
    passed = {key: value for key, value in console_env.items() if _passed(key)}
    env = {**passed, **extra, "HF_TOKEN_PATH": os.devnull}
    if hf_token:
        env["HF_TOKEN"] = hf_token
    else:
        env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    return env


def describe(argv: list[str]) -> str:
    """The argv as one line a user can paste into a shell."""
    return shlex.join(argv)
