"""What a model server is started with, from the manifest: vLLM engine flags from the engine
and serving fields and extraArgs as given (engine_args), the variables it reads (engine_env:
the CPU KV cache), and, for KServe's container, the Hugging Face token from the profile's
Secret. The container (container_args, container_env) and the virtual machine (its start plan)
take both from here, so the same manifest starts the same server either way.

manifest.parse refuses an extraArgs entry that repeats a flag set here, so flags never clash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jobs.manifest.adapters import lora_args
from jobs.manifest.quantity import parse_bytes
from jobs.manifest.uri import UriError, parse_uri

from .common import number_text
from .runtimes import Runtime

GIB = 2**30
HF_TOKEN_KEY = "HF_TOKEN"
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# vLLM fetches a request's media links itself: it must follow no redirect, or a public link
# the gateway checked (jobs/gateway/media.py) could lead inward. vLLM has no setting of its own
# that refuses private addresses; the gateway's check is what does.
VLLM_MEDIA_ENV = {"VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0"}
# vLLM's --limit-mm-per-prompt keys, in a fixed order so equal manifests give equal text.
MODALITY_KEYS = (
    ("maxImagesPerPrompt", "image"),
    ("maxVideosPerPrompt", "video"),
    ("maxAudioClipsPerPrompt", "audio"),
)


def engine_args(
    model: Mapping[str, Any], engine: str, on_gpu: bool, *, sizes: bool = True
) -> list[str]:
    """The server's arguments from the manifest: for vLLM its flags, then extraArgs; any other
    server takes only extraArgs, as is (engine fields are vLLM flags). `sizes`: vLLM's tensor and
    pipeline parallel sizes are passed (KServe's multi-node runtime passes them itself)."""
    extra = [str(a) for a in _engine(model).get("extraArgs") or ()]
    if engine == "vllm":
        return [*_vllm_args(model, on_gpu, multinode=not sizes), *extra]
    return extra


def engine_env(model: Mapping[str, Any], engine: str, on_gpu: bool) -> dict[str, str]:
    """The variables the server reads from the manifest (values, never secrets)."""
    env: dict[str, str] = {}
    kv = _kv_cache(model)
    if engine == "vllm" and not on_gpu and kv is not None:
        # vLLM on CPU sizes its KV cache from this variable, in whole GiB (at least 1).
        env[CPU_KV_CACHE_ENV] = str(max(1, parse_bytes(kv) // GIB))
    if engine == "vllm":
        env.update(VLLM_MEDIA_ENV)
    return env


def container_args(model: Mapping[str, Any], runtime: Runtime, on_gpu: bool) -> list[str]:
    """Arguments appended to the runtime's own (KServe concatenates runtime + predictor)."""
    if runtime.kind == "vllm":
        # KServe's Hugging Face server runs vLLM when told so; vLLM's own flags follow.
        args = engine_args(model, "vllm", on_gpu, sizes=not runtime.multinode)
        return ["--backend=vllm", *args]
    if runtime.kind in ("parakeet", "custom"):
        return engine_args(model, runtime.kind, on_gpu)
    return []


def _engine(model: Mapping[str, Any]) -> Mapping[str, Any]:
    engine = model.get("engine")
    return engine if isinstance(engine, Mapping) else {}


def _vllm_args(model: Mapping[str, Any], on_gpu: bool, multinode: bool) -> list[str]:
    engine = _engine(model)
    serving = model.get("serving") or {}
    args: list[str] = []
    if serving.get("maxContextTokens") is not None:
        args.append(f"--max-model-len={serving['maxContextTokens']}")
    if on_gpu and not multinode:
        # The multi-node runtime passes both sizes itself, from workerSpec (TENSOR_PARALLEL_SIZE,
        # PIPELINE_PARALLEL_SIZE); giving them twice would only invite disagreement.
        args.append(f"--tensor-parallel-size={engine.get('tensorParallelSize') or 1}")
        args.append(f"--pipeline-parallel-size={engine.get('pipelineParallelSize') or 1}")
    if engine.get("dtype"):
        args.append(f"--dtype={engine['dtype']}")
    if engine.get("quantization"):
        args.append(f"--quantization={engine['quantization']}")
    if engine.get("reasoningParser"):
        args.append(f"--reasoning-parser={engine['reasoningParser']}")
    if engine.get("toolCallParser"):
        # A parser alone only parses; clients' tool_choice "auto" needs this as well.
        args.append(f"--tool-call-parser={engine['toolCallParser']}")
        args.append("--enable-auto-tool-choice")
    if on_gpu and engine.get("gpuMemoryUtilization") is not None:
        args.append(f"--gpu-memory-utilization={number_text(engine['gpuMemoryUtilization'])}")
    if serving.get("maxConcurrentRequests") is not None:
        args.append(f"--max-num-seqs={serving['maxConcurrentRequests']}")
    limits = _multimodal_limits(serving.get("multimodal"))
    if limits:
        args.append(f"--limit-mm-per-prompt={json.dumps(limits, separators=(',', ':'))}")
    if on_gpu and serving.get("kvCacheSize") is not None:
        args.append(f"--kv-cache-memory-bytes={parse_bytes(serving['kvCacheSize'])}")
    return args + lora_args(_hub_adapters(model))


def _hub_adapters(model: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, Hub repo id) of each LoRA adapter: on a cluster vLLM downloads it from the Hub
    itself (with the profile's token; manifest.parse accepts only hf:// adapters there).
    vLLM's --lora-modules takes no revision: it loads the repository's main branch."""
    found: list[tuple[str, str]] = []
    for item in model.get("adapters") or ():
        try:
            info = parse_uri(str(item.get("uri")))
        except UriError:
            continue
        if info.scheme == "hf" and info.hf_repo:
            found.append((str(item.get("name")), info.hf_repo))
    return found


def _multimodal_limits(block: Any) -> dict[str, int]:
    if not isinstance(block, Mapping):
        return {}
    return {key: block[field] for field, key in MODALITY_KEYS if block.get(field) is not None}


def container_env(
    model: Mapping[str, Any], runtime: Runtime, on_gpu: bool, hf_secret: str | None
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": name, "value": value}
        for name, value in engine_env(model, runtime.kind, on_gpu).items()
    ]
    if hf_secret and runtime.kind != "predictive":
        # Runtimes of Hub models fetch tokenizer and processor files too; the token comes from
        # the Secret by reference, never as a value.
        env.append(
            {
                "name": HF_TOKEN_KEY,
                "valueFrom": {"secretKeyRef": {"name": hf_secret, "key": HF_TOKEN_KEY}},
            }
        )
    return env


def _kv_cache(model: Mapping[str, Any]) -> Any:
    serving = model.get("serving")
    return serving.get("kvCacheSize") if isinstance(serving, Mapping) else None
