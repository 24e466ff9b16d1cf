"""Fill in every default: turns the typed draft (schema.read) into the filled-in manifest
that `get` shows, and the Facts (effective typed values) the rules check.

Defaults are computed only from values that passed their checks; where a value is Bad the
fields that depend on it stay as given, so one mistake does not fan out into others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .checks import DEFAULT_SCALE_TO_ZERO_AFTER, Bad, Qty, Reject
from .context import ManifestContext, ProfileFacts
from .model_defaults import (
    BUILT_IN_CPU_MEMORY,
    DefaultsAsked,
    ModelDefaults,
    VmGpus,
    model_defaults,
    vm_kinds,
)
from .problems import Problem
from .quantity import format_bytes
from .schema import (
    API_VERSION,
    FORMAT_ENGINE,
    GENERATIVE_FORMATS,
    INSTALLED_RUNTIMES,
    KIND,
    MODEL,
    PARAKEET_REPO,
    Leaf,
    api_formats,
)
from .uri import VLLM_DEFAULT_SCHEMES, UriError, UriInfo, parse_uri

GIB = 2**30
# Memory the runtime is given when the manifest does not say: what vLLM needs to start on
# CPU or GPU, and the KServe predictive runtimes' own request.
MEMORY_DEFAULTS = {
    "generative-cpu": BUILT_IN_CPU_MEMORY,
    "generative-gpu": 8 * GIB,
    "predictive": 2 * GIB,
}
CPU_PER_GPU = 3
ENGINE_BUILTIN_DEFAULTS: dict[str, Any] = {
    "dtype": "auto",
    "quantization": None,
    "reasoningParser": None,
    "toolCallParser": None,
    "gpuMemoryUtilization": 0.9,
    "extraArgs": [],
}
MODEL_MASTER_KEYS = tuple(ENGINE_BUILTIN_DEFAULTS)
DEFAULT_REQUESTS_WAITING = 2
DEFAULT_CPU_PERCENT = 80
MODEL_PATH = "spec.source.model"


@dataclass
class Facts:
    """Effective, well-typed values after defaults; None where unknown or invalid."""

    profile: ProfileFacts | None = None
    namespace: str | None = None
    source_type: str | None = None
    uri: UriInfo | None = None
    format: str | None = None
    engine: str | None = None
    isolation: str | None = None
    generative: bool | None = None
    on_gpu: bool | None = None
    vendor: str | None = None
    gpu_model: str | None = None
    count: int | None = None
    nodes: int | None = None
    cores: Fraction | None = None
    memory: int | None = None
    memory_default: int | None = None
    tp: int | None = None
    pp: int | None = None
    kv_cache: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    metric: dict[str, Any] | None = None
    metric_defaulted: bool = False
    queue_name: str | None = None
    queue_known: bool = False  # queue.name passed its checks (null counts: no queue)
    cache_enabled: bool | None = None
    cache_size: int | None = None
    cache_group: str | None = None
    master_problems: list[Problem] = field(default_factory=list)
    # What the model-dependent defaults were decided on, and what they filled (model_defaults).
    model_asked: DefaultsAsked | None = None
    model_filled: ModelDefaults = field(default_factory=ModelDefaults)

    @property
    def parakeet(self) -> bool:
        return self.engine == "parakeet"

    @property
    def custom_runtime(self) -> bool:
        """runtime.engine names a serving runtime of the user's, not one the platform installs."""
        return self.engine is not None and self.engine not in INSTALLED_RUNTIMES

    @property
    def vllm_fields(self) -> bool:
        """The engine and serving fields reach a vLLM the platform runs: not parakeet (not
        vLLM) nor a runtime of the user's (it gets engine.extraArgs only)."""
        return bool(self.generative) and not (self.parakeet or self.custom_runtime)

    @property
    def multinode(self) -> bool:
        return self.nodes is not None and self.nodes > 1


def ok(value: Any) -> bool:
    """A value that is present and passed its checks."""
    return value is not None and not isinstance(value, Bad)


def plain(value: Any) -> Any:
    """The manifest form of a typed value: what the user wrote, or the default's text."""
    if isinstance(value, Bad):
        return value.raw
    if isinstance(value, Qty):
        return value.raw
    if isinstance(value, UriInfo):
        return value.text
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


def group(draft: Any, name: str) -> dict[str, Any]:
    """A sub-group of the draft as a dict (empty when absent, null or Bad)."""
    if isinstance(draft, dict):
        sub = draft.get(name)
        if isinstance(sub, dict):
            return sub
    return {}


def fill(draft: Any, ctx: ManifestContext) -> tuple[dict[str, Any] | None, Facts]:
    facts = Facts()
    if not isinstance(draft, dict) or not isinstance(draft.get("spec"), dict):
        return None, facts
    spec = draft["spec"]
    profile_name = spec["profileName"]
    if isinstance(profile_name, str):
        facts.profile = ctx.profiles.get(profile_name)
    namespace = spec["namespace"]
    if namespace is None and facts.profile is not None:
        namespace = facts.profile.namespace
    facts.namespace = namespace if ok(namespace) else None

    out_spec: dict[str, Any] = {
        "name": plain(spec["name"]),
        "profileName": plain(profile_name),
        "namespace": plain(namespace),
        "syncType": plain(spec["syncType"]) if spec["syncType"] is not None else "Auto",
        "access": _access(spec["access"]),
        "source": _source(spec["source"], ctx, facts),
    }
    from . import rollout  # it reads this module's helpers

    filled_rollout = rollout.fill(spec["rollout"])
    if filled_rollout is not None:  # absent: Replace, and the manifest is as before the field
        out_spec["rollout"] = filled_rollout
    # The document is ours whatever apiVersion/kind said (those were refused if wrong).
    return {"apiVersion": API_VERSION, "kind": KIND, "spec": out_spec}, facts


def _access(access: Any) -> Any:
    if isinstance(access, Bad):
        return access.raw
    access = access or {}
    exposure = access.get("exposure")
    out: dict[str, Any] = {"exposure": plain(exposure) if exposure is not None else "Internal"}
    if exposure == "Domain":
        out["domain"] = plain(access.get("domain"))
        out["accessPolicy"] = plain(access.get("accessPolicy"))
    else:
        # Refused by the rules when set with Internal; kept so `get` shows what was written.
        for key in ("domain", "accessPolicy"):
            if access.get(key) is not None:
                out[key] = plain(access[key])
    return out


def _source(source: Any, ctx: ManifestContext, facts: Facts) -> Any:
    if isinstance(source, Bad):
        return source.raw
    if source is None:
        return None
    kind = source["type"]
    facts.source_type = kind if ok(kind) else None
    out: dict[str, Any] = {"type": plain(kind)}
    if kind == "YAML":
        out["inferenceService"] = source["inferenceService"]  # a plain copy (parse.py)
        return out
    model = source["model"]
    if isinstance(model, dict):
        out["model"] = _model(model, ctx, facts)
    elif model is not None:
        out["model"] = plain(model)
    if kind != "Model" and source["inferenceService"] is not None:
        out["inferenceService"] = source["inferenceService"]
    return out


def _model(model: dict[str, Any], ctx: ManifestContext, facts: Facts) -> dict[str, Any]:
    uri = model["uri"]
    facts.uri = uri if isinstance(uri, UriInfo) else None
    fmt = model["format"]
    if fmt is None and facts.uri is not None and facts.uri.scheme in VLLM_DEFAULT_SCHEMES:
        fmt = "vLLM"
    facts.format = fmt if ok(fmt) else None
    if facts.format is not None:
        facts.generative = facts.format in GENERATIVE_FORMATS

    runtime = model["runtime"]
    run = runtime if isinstance(runtime, dict) else {}
    engine = run.get("engine")
    if engine is None and facts.format is not None:
        engine = FORMAT_ENGINE[facts.format]
        if facts.uri is not None and (facts.uri.hf_repo or "").lower() == PARAKEET_REPO:
            engine = "parakeet"
    isolation = run.get("isolation") if run.get("isolation") is not None else "Container"
    facts.engine = engine if ok(engine) else None
    facts.isolation = isolation if ok(isolation) else None
    out_runtime: Any = (
        runtime.raw
        if isinstance(runtime, Bad)
        else {"engine": plain(engine), "isolation": plain(isolation)}
    )

    resources = model["resources"]
    accelerator = resources.get("accelerator") if isinstance(resources, dict) else None
    gpu = accelerator.get("gpu") if isinstance(accelerator, dict) else None
    if isinstance(resources, Bad) or isinstance(accelerator, Bad) or isinstance(gpu, Bad):
        facts.on_gpu = None
    else:
        facts.on_gpu = gpu is not None
    gpu = gpu if isinstance(gpu, dict) else {}
    if facts.on_gpu:
        facts.count = gpu["countPerReplica"] if ok(gpu["countPerReplica"]) else None
        vendor = gpu["vendor"] if gpu["vendor"] is not None else "nvidia"
        facts.vendor = vendor if ok(vendor) else None
        facts.gpu_model = gpu["model"] if ok(gpu["model"]) else None
    res = group(model, "resources")
    nodes = res.get("nodesPerReplica")
    nodes = 1 if nodes is None else nodes
    facts.nodes = nodes if ok(nodes) else None

    # A virtual machine's GPUs of no kind: model_defaults chooses the kind Check model sized.
    vm_gpus = None
    kindless = facts.on_gpu and gpu.get("model") is None and facts.isolation == "VirtualMachine"
    if kindless and facts.count is not None and facts.nodes is not None:
        vm_gpus = VmGpus(facts.count, facts.nodes, vm_kinds(facts.profile, facts.vendor))
    filled = _model_defaults(model, ctx, facts, vm_gpus)
    if filled.gpu_model is not None:
        facts.gpu_model = filled.gpu_model
    if filled.uri is not None:
        uri = _pinned(filled.uri, uri)
        facts.uri = uri if isinstance(uri, UriInfo) else None
    out: dict[str, Any] = {
        "uri": plain(uri),
        "format": plain(fmt),
        "runtime": out_runtime,
    }
    engine_block = model["engine"]
    if facts.parakeet:
        # Not vLLM: no engine block is filled; one given is refused by the rules.
        if engine_block is not None:
            out["engine"] = _as_given(engine_block)
    elif facts.generative and facts.custom_runtime:
        out["engine"] = _engine(engine_block, ctx, facts, only_given=True)
    elif facts.generative or (facts.generative is None and engine_block is not None):
        out["engine"] = _engine(engine_block, ctx, facts)
    out["serving"] = _serving(model["serving"], model, facts, filled.context_tokens)
    out["resources"] = _resources(resources, facts, filled.memory)
    # The CPU defaults of serving depend on resources, which come later in the document.
    serving = out["serving"]
    if isinstance(serving, dict) and facts.vllm_fields and facts.on_gpu is False:
        given = group(model, "serving")
        if given.get("kvCacheSize") is None and facts.memory is not None:
            quarter = facts.memory // 4
            serving["kvCacheSize"] = format_bytes(quarter)
            facts.kv_cache = quarter
        if given.get("maxConcurrentRequests") is None and facts.cores is not None:
            serving["maxConcurrentRequests"] = min(1024, max(1, int(facts.cores * 2)))
    out["scaling"] = _scaling(model["scaling"], facts)
    queue = model["queue"]
    if isinstance(queue, Bad):
        out["queue"] = queue.raw
    else:
        name = (queue or {}).get("name")
        out["queue"] = {"name": plain(name)}
        facts.queue_known = not isinstance(name, Bad)
        facts.queue_name = name if ok(name) else None
    out["cache"] = _cache(model["cache"], facts)
    if model.get("adapters") is not None:  # written only when given: most models have none
        out["adapters"] = plain(model["adapters"])
    return out


def _model_defaults(
    model: dict[str, Any], ctx: ManifestContext, facts: Facts, vm_gpus: VmGpus | None = None
) -> ModelDefaults:
    """The defaults that depend on the model (its context window, the memory that holds it,
    its pinned commit), decided in model_defaults on what Check model found (ctx.model)."""
    resources = model["resources"]
    serving = group(model, "serving")
    existing = ctx.existing
    asked = DefaultsAsked(
        uri=facts.uri,
        vllm_fields=facts.vllm_fields,
        generative_on_cpu=bool(facts.generative) and facts.on_gpu is False,
        context_given=serving.get("maxContextTokens") is not None,
        memory_given=isinstance(resources, Bad)
        or group(model, "resources").get("memory") is not None,
        master_context=ctx.master_context_tokens,
        existing=existing.manifest if existing is not None else None,
        served=existing is not None and existing.served_at is not None,
        vm_gpus=vm_gpus,
    )
    facts.model_asked = asked
    facts.model_filled = model_defaults(asked, ctx.model)
    return facts.model_filled


def _pinned(text: str, given: Any) -> Any:
    """The uri pinned to its commit, as the schema would have read it."""
    try:
        return parse_uri(text)
    except UriError:  # a commit from the Hub that is not one: keep the uri as given
        return given


def _as_given(block: Any) -> Any:
    """A block shown as written (only the fields set), for a runtime that takes none of it."""
    if isinstance(block, Bad):
        return block.raw
    return {k: plain(v) for k, v in block.items() if v is not None}


def _engine(block: Any, ctx: ManifestContext, facts: Facts, only_given: bool = False) -> Any:
    """The vLLM engine fields with their defaults; with only_given (a runtime of the user's,
    which is passed extraArgs alone) the fields set and extraArgs, so `get` shows no vLLM
    defaults that would not run."""
    if isinstance(block, Bad):
        return block.raw
    block = block or {}
    fields = MODEL.fields["engine"].fields
    masters = ctx.engine_defaults or {}
    out: dict[str, Any] = {}
    for key in fields:
        value = block.get(key)
        if value is None:
            if only_given and key != "extraArgs":
                continue
            value = _engine_default(key, masters, fields, facts)
        out[key] = plain(value)
        if key == "tensorParallelSize":
            facts.tp = value if ok(value) else None
        elif key == "pipelineParallelSize":
            facts.pp = value if ok(value) else None
    return out


def engine_default(key: str, engine_defaults: Mapping[str, Any]) -> Any:
    """What the manifest fills for engine.<key> when it is not given: the model master's
    default (checked where it is filled), else the built-in one. The wizard sizes a draft
    before it is filled with the value the fill will give."""
    if key in engine_defaults:
        return engine_defaults[key]
    value = ENGINE_BUILTIN_DEFAULTS[key]
    return list(value) if isinstance(value, list) else value


def _engine_default(
    key: str, masters: Mapping[str, Any], fields: Mapping[str, Leaf], facts: Facts
) -> Any:
    if key == "tensorParallelSize":
        if facts.on_gpu is False:
            return 1
        return facts.count
    if key == "pipelineParallelSize":
        return facts.nodes
    if key not in masters:
        return engine_default(key, masters)
    value = masters[key]
    if value is None:
        return None
    try:
        # The model master is data too: check it like user input, and say where it came from.
        return fields[key].check(value)
    except Reject as exc:
        path = f"{MODEL_PATH}.engine.{key}"
        facts.master_problems.append(
            Problem(
                path,
                f"the model master's default {exc.reason}; accepts {fields[key].accepts}. "
                f"Set engine.{key} in the manifest, or correct the model master.",
            )
        )
        return Bad(value)


def _serving(
    serving: Any, model: dict[str, Any], facts: Facts, context_default: int | None = None
) -> Any:
    if isinstance(serving, Bad):
        return serving.raw
    serving = serving or {}
    api = serving.get("apiFormat")
    if api is None and facts.generative is not None:
        # The first format the runtime speaks: V1 for most predictive runtimes, V2 for those
        # that speak only v2 (MLServer, Triton). A runtime of the user's: V1 (docs/manifest.md).
        spoken = api_formats(facts.engine, facts.generative)
        api = spoken[0] if spoken else ("OpenAI" if facts.generative else "V1")
    out: dict[str, Any] = {"apiFormat": plain(api)}
    if facts.vllm_fields:
        context = serving.get("maxContextTokens")
        out["maxContextTokens"] = plain(context if context is not None else context_default)
        out["kvCacheSize"] = plain(serving.get("kvCacheSize"))
        out["maxConcurrentRequests"] = plain(serving.get("maxConcurrentRequests"))
        kv = serving.get("kvCacheSize")
        facts.kv_cache = kv.amount if isinstance(kv, Qty) else None
    else:
        # Refused for a predictive model, a warning for a runtime that is not passed them (the
        # rules); shown as written.
        for key in ("maxContextTokens", "kvCacheSize", "maxConcurrentRequests"):
            if serving.get(key) is not None:
                out[key] = plain(serving[key])
    multimodal = serving.get("multimodal")
    if isinstance(multimodal, dict):
        # Only the limits given: an unset one is the runtime's own, not a number we invent.
        out["multimodal"] = {k: plain(v) for k, v in multimodal.items() if v is not None}
    elif multimodal is not None:
        out["multimodal"] = plain(multimodal)
    return out


def _resources(resources: Any, facts: Facts, memory_for_model: int | None = None) -> Any:
    if isinstance(resources, Bad):
        return resources.raw
    resources = resources or {}
    if facts.generative:
        memory_default = MEMORY_DEFAULTS["generative-gpu" if facts.on_gpu else "generative-cpu"]
    else:
        memory_default = MEMORY_DEFAULTS["predictive"]
    facts.memory_default = memory_default if facts.on_gpu is not None else None

    cpu = resources.get("cpu")
    if cpu is None:
        cores = 1
        if facts.generative and facts.on_gpu and facts.count is not None:
            cores = CPU_PER_GPU * facts.count
        cpu = Qty(str(cores), Fraction(cores))
    facts.cores = cpu.amount if isinstance(cpu, Qty) else None
    memory = resources.get("memory")
    if memory is None:
        # What holds this model on CPU (model_defaults), else the built-in default.
        amount = memory_for_model or memory_default
        memory = Qty(format_bytes(amount), amount)
    facts.memory = memory.amount if isinstance(memory, Qty) else None

    out: dict[str, Any] = {"cpu": plain(cpu), "memory": plain(memory)}
    accelerator = resources.get("accelerator")
    if isinstance(accelerator, Bad):
        out["accelerator"] = accelerator.raw
    elif isinstance(accelerator, dict) and isinstance(accelerator.get("gpu"), Bad):
        out["accelerator"] = {"gpu": accelerator["gpu"].raw}
    elif facts.on_gpu:
        gpu = accelerator["gpu"]
        out["accelerator"] = {
            "gpu": {
                "vendor": plain(gpu["vendor"]) if gpu["vendor"] is not None else "nvidia",
                # Given, else a virtual machine's kind Check model chose (model_defaults).
                "model": plain(gpu["model"]) if gpu["model"] is not None else facts.gpu_model,
                "countPerReplica": plain(gpu["countPerReplica"]),
                "capacityType": (
                    plain(gpu["capacityType"]) if gpu["capacityType"] is not None else "Any"
                ),
            }
        }
    nodes = resources.get("nodesPerReplica")
    out["nodesPerReplica"] = plain(nodes) if nodes is not None else 1
    return out


def _scaling(scaling: Any, facts: Facts) -> Any:
    if isinstance(scaling, Bad):
        return scaling.raw
    scaling = scaling or {}
    low = scaling.get("minReplicas")
    low = 1 if low is None else low
    high = scaling.get("maxReplicas")
    if high is None and ok(low):
        high = max(low, 1)
    # minReplicas 0: awake, the model runs at least one replica; the rules on counts and
    # autoscaling read that, the sleeping is the reconciler's and the gateway's.
    facts.min_replicas = max(low, 1) if ok(low) else None
    facts.max_replicas = high if ok(high) else None
    after = scaling.get("scaleToZeroAfter")
    if after is None and ok(low) and low == 0:
        after = DEFAULT_SCALE_TO_ZERO_AFTER
    metric = scaling.get("metric")
    if isinstance(metric, Bad):
        out_metric: Any = metric.raw
    elif metric is not None:
        set_keys = {k: v for k, v in metric.items() if v is not None}
        out_metric = plain(set_keys) if set_keys else None
        if set_keys and all(ok(v) for v in set_keys.values()):
            facts.metric = set_keys
        if not set_keys:
            metric = None
    if metric is None:
        out_metric = _default_metric(facts)
        facts.metric = out_metric
        facts.metric_defaulted = True
    out = {"minReplicas": plain(low), "maxReplicas": plain(high), "metric": out_metric}
    if after is not None:
        out["scaleToZeroAfter"] = plain(after)
    return out


def _default_metric(facts: Facts) -> dict[str, Any] | None:
    if facts.min_replicas is None or facts.max_replicas is None:
        return None
    if facts.min_replicas >= facts.max_replicas:
        return None
    if facts.multinode:
        return None  # KServe runs a multi-node replica at a fixed count only (the rules refuse)
    addons = facts.profile.addons if facts.profile is not None else frozenset()
    # requestsWaiting is vLLM's metric: the parakeet runtime does not export it.
    if facts.generative and not facts.parakeet and "keda" in addons:
        return {"requestsWaiting": DEFAULT_REQUESTS_WAITING}
    if facts.on_gpu is False:
        return {"cpu": DEFAULT_CPU_PERCENT}
    return None


def _cache(cache: Any, facts: Facts) -> Any:
    if isinstance(cache, Bad):
        return cache.raw
    cache = cache or {}
    enabled = cache.get("enabled")
    enabled = False if enabled is None else enabled
    facts.cache_enabled = enabled if ok(enabled) else None
    out: dict[str, Any] = {"enabled": plain(enabled)}
    size = cache.get("size")
    node_group = cache.get("nodeGroup")
    if enabled is True:
        groups = facts.profile.cache_node_groups if facts.profile is not None else {}
        if node_group is None and len(groups) == 1:
            node_group = next(iter(groups))
        out["size"] = plain(size)
        out["nodeGroup"] = plain(node_group)
    else:
        for key, value in (("size", size), ("nodeGroup", node_group)):
            if value is not None:
                out[key] = plain(value)
    facts.cache_size = size.amount if isinstance(size, Qty) else None
    facts.cache_group = node_group if ok(node_group) else None
    return out
