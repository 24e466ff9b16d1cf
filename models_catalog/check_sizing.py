"""Check model's figures for a model it can serve: its weights, context, KV cache and memory
sized on the profile's machine catalog (a vLLM model, or a Parakeet .nemo archive), the
warnings that go with them, and the step to deploy it."""

from __future__ import annotations

from dataclasses import replace

from models_catalog import architectures, hub
from models_catalog.check_types import SERVABLE, CheckResult, HubRequest
from models_catalog.refusals import refuse, too_large
from models_catalog.sizing import (
    Demand,
    Weights,
    cache_size,
    kv_bytes_per_token,
    kv_cache_bytes,
    max_context,
    model_shape,
    size_on_catalog,
    weights_from_file_bytes,
    weights_from_safetensors,
)

PARAKEET_ARCHITECTURE = "ParakeetForTDT"


def servable(result: CheckResult, next_step: str | None = None) -> CheckResult:
    """`result` answered as can serve; the next step is, unless given, to deploy it on the
    machine suggested."""
    step = next_step or _deploy_step(result)
    return replace(result, can_serve=True, verdict=SERVABLE, next_step=step)


def size_vllm(
    base: CheckResult,
    request: HubRequest,
    info: hub.HubModelInfo,
    found: architectures.ArchInfo,
    config: dict,
    tokenizer_config: dict | None,
    weight_format: str,
    files: list[str] | None,
) -> CheckResult:
    """A vLLM model's figures from its config and weights, sized for the context and the
    requests at once asked; refused when the context is above the model's own limit or no
    machine of the catalog holds it."""
    task, encoder_config = found.task, None
    modules = request.read("modules.json", info.sha)
    pooling = [m for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []
    if any("Pooling" in str(m.get("type")) for m in pooling):
        # A Sentence-Transformers pooling config makes it a pooling model.
        task = "embed" if task == "generate" else task
        encoder = request.read("sentence_bert_config.json", info.sha)
        encoder_config = encoder if isinstance(encoder, dict) else None
    weights, disk_bytes, source = _weights(request, info, config, weight_format, files)
    shape = model_shape(config)
    limit = max_context(config, tokenizer_config, encoder_config)
    result = replace(
        base,
        runtime="vllm",
        task=task,
        parameters=weights.parameters,
        weight_dtype=weights.dtype,
        weight_bytes=weights.stored_bytes,
        weight_source=source,
        max_context_tokens=limit,
        kv_bytes_per_token=kv_bytes_per_token(shape),
        cache_size=cache_size(disk_bytes) if disk_bytes else None,
        modalities=list(found.modalities),
        warnings=base.warnings + _arch_warnings(found, base.custom_code, weight_format),
    )
    wanted = request.context_tokens
    if wanted is not None and wanted > limit:
        return refuse(
            result,
            f"serving.maxContextTokens {wanted} is above the model's own limit of {limit} tokens; "
            "the runtime would not start.",
            f"Set serving.maxContextTokens to {limit} or less.",
        )
    context = wanted or limit
    kv = kv_cache_bytes(shape, context, base.concurrency)
    demand = Demand(weights.gpu_bytes, kv, shape, request.gpu_memory_utilization)
    sizing = size_on_catalog(demand, request.catalog, nvidia_only=True)
    result = replace(
        result,
        context_tokens=context,
        memory_needed_bytes=sizing.memory_needed_bytes,
        cpu_memory_bytes=sizing.cpu_memory_bytes,
        suggestion=sizing.suggestion,
        options=sizing.options,
        unfit=sizing.unfit,
    )
    if sizing.suggestion is None:
        return too_large(result, request, demand, sizing, context)
    return servable(result)


def _weights(
    request: HubRequest,
    info: hub.HubModelInfo,
    config: dict,
    weight_format: str,
    files: list[str] | None,
) -> tuple[Weights, int | None, str]:
    if weight_format == "safetensors":
        summary = request.safetensors()
        if summary is not None:
            weights = weights_from_safetensors(summary.parameters_by_dtype, config)
            return weights, summary.file_bytes, summary.source
    size = info.size_of(files or [])
    if not size:
        raise hub.BadFile(
            f"the Hub gave no sizes for the weights of {request.repo}",
            endpoint=request.endpoint,
            repo=request.repo,
        )
    return weights_from_file_bytes(size, config), size, "file sizes"


def _arch_warnings(
    found: architectures.ArchInfo, custom_code: bool, weight_format: str
) -> list[str]:
    warnings = []
    if found.via == "transformers":
        warnings.append(
            f"vLLM {found.vllm_version} serves {found.name} through its Transformers backend, "
            "not a native implementation: expect lower throughput, and some features may be "
            "missing."
        )
    if custom_code:
        warnings.append(
            f"The repository ships custom code (auto_map in its config); vLLM uses its own "
            f"implementation of {found.name}, so that code is not run."
        )
    if weight_format == "bin":
        warnings.append(
            "The weights are PyTorch .bin (pickle) files: vLLM loads them, but safetensors loads "
            "faster and cannot carry code."
        )
    if found.data_version != found.vllm_version:
        warnings.append(
            f"No architecture list for vLLM {found.vllm_version} is on file; answered with "
            f"vLLM {found.data_version}'s. Regenerate it with manage.py vllm_architectures."
        )
    return warnings


def _deploy_step(result: CheckResult) -> str:
    suggestion = result.suggestion
    assert suggestion is not None
    step = f"Deploy it on {suggestion.describe()}"
    if result.cache_size:
        step += f"; reserve a {result.cache_size} weight cache if caching is on"
    return step + "."


def size_parakeet(base: CheckResult, request: HubRequest, info: hub.HubModelInfo) -> CheckResult:
    """NeMo Parakeet speech recognition: the parakeet runtime, sized from the .nemo archive
    (float32 weights, so parameters are its size over 4)."""
    archives = [name for name in info.file_names if name.endswith(".nemo")]
    size = info.size_of(archives) or 0
    weights = weights_from_file_bytes(size, {"torch_dtype": "float32"})
    demand = Demand(size, 0, None, request.gpu_memory_utilization)
    sizing = size_on_catalog(demand, request.catalog, nvidia_only=True)
    result = replace(
        base,
        runtime="parakeet",
        task="transcribe",
        architecture=PARAKEET_ARCHITECTURE,
        parameters=weights.parameters,
        weight_dtype="float32",
        weight_bytes=size,
        weight_source="file sizes",
        memory_needed_bytes=sizing.memory_needed_bytes,
        cpu_memory_bytes=sizing.cpu_memory_bytes,
        suggestion=sizing.suggestion,
        options=sizing.options,
        unfit=sizing.unfit,
        cache_size=cache_size(size),
        modalities=["audio"],
    )
    if sizing.suggestion is None:
        return refuse(
            result,
            "No machine of the profile's catalog holds this speech model"
            + "".join(f"; {kind} {why}" for kind, why in sizing.unfit)
            + ".",
            "Add a GPU kind to the profile's machine catalog, or use a profile with GPUs.",
        )
    return servable(result)
