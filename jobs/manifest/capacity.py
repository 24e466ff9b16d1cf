"""Rules on what a replica takes and where it runs: resources against the profile's GPU
kinds, scaling, the queue and the weight cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from jobs.machine_catalog import cpu_machines, gpu_kinds

from .checks import Qty
from .defaults import MODEL_PATH as M
from .defaults import Facts, group, ok
from .problems import Out, listing, show
from .quantity import format_bytes, format_cpu, parse_quantity


def check_capacity(model: dict[str, Any], facts: Facts, out: Out) -> None:
    _resources(model, facts, out)
    _scaling(model, facts, out)
    _queue(model, facts, out)
    _cache(model, facts, out)


# --- resources -------------------------------------------------------------------------------


def _catalog(facts: Facts) -> list[Mapping[str, Any]]:
    profile = facts.profile
    if profile is None:
        return []
    return gpu_kinds(profile.machine_catalog)  # a machine without GPUs is no GPU model


def kind_of_gpu(facts: Facts) -> Mapping[str, Any] | None:
    if facts.gpu_model is None:
        return None
    for kind in _catalog(facts):
        if kind["name"] == facts.gpu_model:
            return kind
    return None


def byte_amount(value: Any) -> int | None:
    try:
        amount = parse_quantity(value)
    except ValueError:
        return None
    return int(amount) if amount.denominator == 1 else None


def _cores(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def _gpus_per_node(kind: Mapping[str, Any]) -> int | None:
    value = kind.get("gpusPerNode")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _resources(model: dict[str, Any], facts: Facts, out: Out) -> None:
    res = group(model, "resources")
    base = f"{M}.resources"
    memory = res.get("memory")
    default = facts.memory_default
    if isinstance(memory, Qty) and default is not None and memory.amount < default:
        what = (
            ("a generative model on a GPU" if facts.on_gpu else "a generative model on CPU")
            if facts.generative
            else "a predictive model"
        )
        out.warn(
            f"{base}.memory",
            f"{show(memory.raw)} is below the default for {what} "
            f"({format_bytes(facts.memory_default)}); the runtime may fail to start or be "
            f"killed for lack of memory. Raise it to {format_bytes(facts.memory_default)} "
            "unless you know it fits.",
        )
    if facts.nodes is not None and facts.nodes > 1 and facts.on_gpu is False:
        out.refuse(
            f"{base}.nodesPerReplica",
            f"{facts.nodes} but the model runs on CPU: spanning nodes needs GPUs; accepts 1 on "
            "CPU. Set nodesPerReplica to 1, or add resources.accelerator.gpu.",
        )
    if facts.on_gpu:
        _gpu(res, facts, out)
    elif facts.on_gpu is False:
        _cpu_machine(facts, out)


def _cpu_machine(facts: Facts, out: Out) -> None:
    """On the CPU, a replica's memory must fit a machine without GPUs of the catalog, when it
    lists such machines (a local profile's is this machine); GPU nodes are not offered to a
    CPU replica, so a catalog of GPU kinds alone says nothing here."""
    profile = facts.profile
    if profile is None or facts.memory is None:
        return
    sizes = [byte_amount(m.get("nodeMemory")) for m in cpu_machines(profile.machine_catalog)]
    known = [size for size in sizes if size is not None]
    if known and facts.memory > max(known):
        most = max(known)
        out.refuse(
            f"{M}.resources.memory",
            f"{format_bytes(facts.memory)} does not fit the machine: profile {profile.name}'s "
            f"machine without GPUs has {format_bytes(most)} of memory; accepts at most that. "
            "Lower memory (and the context, whose KV cache it holds), or use a profile with "
            "more memory or GPUs.",
        )


def _gpu(res: dict[str, Any], facts: Facts, out: Out) -> None:
    base = f"{M}.resources"
    gpu_path = f"{base}.accelerator.gpu"
    if facts.vendor == "amd" and facts.engine == "vllm":
        out.refuse(
            f"{gpu_path}.vendor",
            "'amd' with the vllm runtime: the platform's vLLM runtime is NVIDIA only; accepts "
            "nvidia. Set vendor to nvidia, or pin runtime.engine to a runtime of yours that "
            "runs on AMD GPUs.",
        )
    catalog = _catalog(facts)
    if facts.profile is None:
        return
    given_model = group(group(res, "accelerator"), "gpu").get("model")
    if ok(given_model):
        names = [k["name"] for k in catalog]
        kind = kind_of_gpu(facts)
        if kind is None:
            out.pick(
                f"{gpu_path}.model",
                given_model,
                names,
                f"a GPU model of profile {facts.profile.name}'s machine catalog",
                "Ask an admin to add GPU machines to the profile, or leave model out.",
            )
            return
        if facts.vendor is not None and kind.get("vendor", facts.vendor) != facts.vendor:
            out.refuse(
                f"{gpu_path}.model",
                f"{show(given_model)} is a GPU of vendor {kind.get('vendor')} but vendor is "
                f"{facts.vendor}; accepts a GPU model of vendor {facts.vendor}. Set vendor to "
                f"{kind.get('vendor')}, or pick another model.",
            )
            return
        _fits(kinds=[kind], facts=facts, out=out, named=True)
        return
    if not catalog or facts.vendor is None:
        return
    kinds = [k for k in catalog if k.get("vendor", "nvidia") == facts.vendor]
    if not kinds:
        out.refuse(
            f"{gpu_path}.vendor",
            f"{show(facts.vendor)} but profile {facts.profile.name}'s machine catalog has no "
            f"{facts.vendor} GPUs; accepts a vendor of the catalog "
            f"({listing({str(k.get('vendor')) for k in catalog})}). Change vendor or the profile.",
        )
        return
    _fits(kinds=kinds, facts=facts, out=out, named=False)


def _fits(kinds: list[Mapping[str, Any]], facts: Facts, out: Out, named: bool) -> None:
    """Refuse what no node of the candidate GPU kinds can hold, naming the limit."""
    base = f"{M}.resources"
    if named:
        which, hold, have = f"the {kinds[0]['name']} nodes", "hold", "have"
    else:
        which, hold, have = f"the largest {facts.vendor} node of the profile", "holds", "has"
    per_node = [n for n in (_gpus_per_node(k) for k in kinds) if n is not None]
    if facts.count is not None and per_node and facts.count > max(per_node):
        most = max(per_node)
        out.refuse(
            f"{base}.accelerator.gpu.countPerReplica",
            f"{facts.count} is more than {which} {hold} ({most} GPUs per node); accepts 1 to "
            f"{most}. Lower countPerReplica and span nodes with resources.nodesPerReplica (and "
            "engine.pipelineParallelSize).",
        )
    node_cpu = [c for c in (_cores(k.get("nodeCpu")) for k in kinds) if c is not None]
    if facts.cores is not None and node_cpu and facts.cores > max(node_cpu):
        most = max(node_cpu)
        out.refuse(
            f"{base}.cpu",
            f"{format_cpu(facts.cores) if (facts.cores * 1000).denominator == 1 else facts.cores} "
            f"does not fit the node: {which} {have} {_cpu_text(most)} CPU; accepts at most that "
            "per node. Lower cpu, or span more nodes with nodesPerReplica.",
        )
    node_memory = [m for m in (byte_amount(k.get("nodeMemory")) for k in kinds) if m is not None]
    if facts.memory is not None and node_memory and facts.memory > max(node_memory):
        most = max(node_memory)
        out.refuse(
            f"{base}.memory",
            f"{format_bytes(facts.memory)} does not fit the node: {which} {have} "
            f"{format_bytes(most)} of memory; accepts at most that per node. Lower memory, or "
            "span more nodes with nodesPerReplica.",
        )


def _cpu_text(cores: Fraction) -> str:
    return format_cpu(cores) if (cores * 1000).denominator == 1 else str(float(cores))


# --- scaling, queue, cache -------------------------------------------------------------------


def _sleeping(scaling: dict[str, Any], facts: Facts, base: str, out: Out) -> None:
    """minReplicas 0 (scale to zero), and what a Kubernetes profile takes with it;
    scaleToZeroAfter means nothing without it."""
    low, after = scaling.get("minReplicas"), scaling.get("scaleToZeroAfter")
    profile = facts.profile
    if low == 0 and profile is not None and profile.backend == "kubernetes":
        _sleeping_on_kubernetes(facts, base, out)
    if after is not None and ok(after) and ok(low) and low != 0:
        out.warn(
            f"{base}.scaleToZeroAfter",
            f"is ignored: minReplicas is {show(low)}, and only a model with minReplicas 0 "
            "sleeps. Set minReplicas to 0 to let it sleep, or remove scaleToZeroAfter.",
        )


def _sleeping_on_kubernetes(facts: Facts, base: str, out: Out) -> None:
    """The predictor is scaled to zero as KServe's Standard mode allows: autoscalerClass none
    with minReplicas 0 (jobs/render/scaling.py). A VirtualMachine, a multi-node predictor
    (its workers' Deployment keeps its count and its GPUs) or an autoscaler (a
    HorizontalPodAutoscaler does not scale up from zero replicas) cannot sleep that way."""
    if facts.isolation == "VirtualMachine":
        out.refuse(
            f"{base}.minReplicas",
            "0 (scale to zero) is not accepted with runtime.isolation VirtualMachine: the "
            "predictor is scaled to zero through KServe, and a virtual machine is not a "
            "KServe predictor; accepts 1 or more there. Set minReplicas to 1 or more, or use "
            "isolation Container.",
        )
    elif facts.nodes is not None and facts.nodes > 1:
        out.refuse(
            f"{base}.minReplicas",
            f"0 (scale to zero) is not accepted with resources.nodesPerReplica {facts.nodes}: "
            "KServe keeps a multi-node predictor's worker Deployment, and its GPUs, whatever "
            "minReplicas says; accepts 1 or more there. Set minReplicas to 1 or more, or "
            "nodesPerReplica to 1.",
        )
    elif facts.max_replicas is not None and facts.max_replicas > 1:
        out.refuse(
            f"{base}.maxReplicas",
            f"{show(facts.max_replicas)} is above 1 with minReplicas 0 on Kubernetes profile "
            f"{facts.profile.name}: a model that sleeps there runs one replica while awake, at "
            "a fixed count (an autoscaler's HorizontalPodAutoscaler does not scale up from "
            "zero replicas); accepts 1. Set maxReplicas to 1 (or leave it out), or set "
            "minReplicas to 1 or more to autoscale.",
        )


def _scaling(model: dict[str, Any], facts: Facts, out: Out) -> None:
    scaling = group(model, "scaling")
    base = f"{M}.scaling"
    _sleeping(scaling, facts, base, out)
    low, high = facts.min_replicas, facts.max_replicas
    if low is not None and high is not None and high < low:
        out.refuse(
            f"{base}.maxReplicas",
            f"{show(high)} is below minReplicas ({show(low)}); accepts a whole number at least "
            f"minReplicas. Set maxReplicas to {show(low)} or more, or lower minReplicas.",
        )
        return
    if low is not None and high is not None and high > low and facts.multinode and facts.on_gpu:
        out.refuse(
            f"{base}.maxReplicas",
            f"{show(high)} is above minReplicas ({show(low)}), but resources.nodesPerReplica is "
            f"{facts.nodes}: KServe runs multi-node replicas at a fixed count only (autoscaler "
            f"none), so they cannot autoscale; accepts {show(low)} (equal to minReplicas) there. "
            f"Set maxReplicas to {show(low)} (raise minReplicas for more replicas), or set "
            "nodesPerReplica to 1 to autoscale.",
        )
        return
    metric = scaling.get("metric")
    if isinstance(metric, dict):
        chosen = [k for k, v in metric.items() if v is not None]
        if len(chosen) > 1:
            out.refuse(
                f"{base}.metric",
                "sets both cpu and requestsWaiting; accepts exactly one. Keep one of them.",
            )
        if chosen and low is not None and low == high:
            out.refuse(
                f"{base}.metric",
                f"is set but minReplicas and maxReplicas are both {show(low)}, so nothing "
                "scales; accepts a metric only with maxReplicas above minReplicas. Remove "
                "metric, or raise maxReplicas.",
            )
        waiting = metric.get("requestsWaiting")
        if ok(waiting):
            if facts.generative is False:
                out.refuse(
                    f"{base}.metric.requestsWaiting",
                    f"is set for a {facts.format} model; accepts requestsWaiting only for "
                    "generative (vLLM) models. Use cpu (for example cpu: 80) instead.",
                )
            elif facts.parakeet:
                out.refuse(
                    f"{base}.metric.requestsWaiting",
                    "is set for the parakeet runtime, which does not export vLLM's waiting-"
                    "requests metric, so nothing would scale; accepts cpu for it. Use cpu: 80 "
                    "instead.",
                )
            elif facts.profile is not None and "keda" not in facts.profile.addons:
                out.refuse(
                    f"{base}.metric.requestsWaiting",
                    "needs the workload-autoscaling add-on (KEDA), which profile "
                    f"{facts.profile.name} does not have; accepts cpu there. Use cpu: 80, or "
                    "ask an admin to install the add-on.",
                )
    defaulted_none = facts.metric_defaulted and facts.metric is None
    if defaulted_none and low is not None and high is not None and low < high and facts.on_gpu:
        if facts.parakeet:
            why, fix = "for the parakeet runtime (it exports no waiting-requests metric)", ""
        else:
            why, fix = "without the workload-autoscaling add-on", ", install the add-on"
        out.warn(
            f"{base}.metric",
            f"no autoscaler on GPU {why}: it stays at minReplicas ({show(low)}), never "
            f"{show(high)}. Set metric (for example cpu: 80){fix}, or set maxReplicas equal to "
            "minReplicas.",
        )


def _queue(model: dict[str, Any], facts: Facts, out: Out) -> None:
    name = group(model, "queue").get("name")
    profile = facts.profile
    if not ok(name) or profile is None:
        return
    path = f"{M}.queue.name"
    if "kueue" not in profile.addons:
        out.refuse(
            path,
            f"{show(name)} needs the workload-queueing add-on (Kueue), which profile "
            f"{profile.name} does not have; accepts null there. Remove queue.name, or ask an "
            "admin to install the add-on.",
        )
    elif name not in profile.queues:
        out.pick(
            path,
            name,
            profile.queues,
            f"a ClusterQueue of profile {profile.name}",
            "Ask an admin to declare one, or remove queue.name.",
        )


def _cache(model: dict[str, Any], facts: Facts, out: Out) -> None:
    cache = group(model, "cache")
    base = f"{M}.cache"
    if facts.cache_enabled is False:
        for key in ("size", "nodeGroup"):
            if cache.get(key) is not None:
                out.refuse(
                    f"{base}.{key}",
                    f"{show(getattr(cache[key], 'raw', cache[key]))} is set but cache.enabled is "
                    f"false, so it would be ignored; accepts {key} only with enabled: true. Set "
                    f"enabled: true, or remove {key}.",
                )
        return
    if not facts.cache_enabled:
        return
    if facts.uri is not None and facts.uri.scheme in ("pvc", "oci"):
        why = (
            "the weights already sit on a volume"
            if facts.uri.scheme == "pvc"
            else "the node's container runtime already caches images"
        )
        out.refuse(
            f"{base}.enabled",
            f"true, but the artifact is on {facts.uri.scheme}:// and {why}; accepts false for "
            "it. Set "
            "enabled: false.",
        )
        return
    profile = facts.profile
    no_addon = profile is not None and "localModelCache" not in profile.addons
    if no_addon:
        out.refuse(
            f"{base}.enabled",
            f"true needs the weight cache of the model-serving add-on, which profile "
            f"{profile.name} does not have; accepts false there. Set enabled: false, or ask an "
            "admin to install it.",
        )
    # The size is required whatever the profile: said at once with the add-on, not after it.
    if cache.get("size") is None:
        out.refuse(
            f"{base}.size",
            "required when the cache is enabled, missing; accepts the artifact's size on disk "
            "rounded up, such as 30Gi. Set size (Check model reports it).",
        )
    if profile is None or no_addon:
        return  # the node groups of a cache the profile does not have would only repeat it
    groups = profile.cache_node_groups
    given = cache.get("nodeGroup")
    if given is None and not groups:
        out.refuse(
            f"{base}.nodeGroup",
            f"profile {profile.name} has no node group with a weight cache; accepts one of its "
            "cached node groups. Ask an admin to add one, or set enabled: false.",
        )
    elif given is None and len(groups) > 1:
        out.refuse(
            f"{base}.nodeGroup",
            f"required when several node groups have a weight cache ({listing(groups)}); "
            "accepts one of them. Set nodeGroup to the one that should hold the weights.",
        )
    elif ok(given) and given not in groups:
        out.pick(
            f"{base}.nodeGroup",
            given,
            groups,
            "a cached node group",
            "Ask an admin to add one, or set enabled: false.",
        )
    elif facts.cache_group is not None and facts.cache_size is not None:
        capacity = groups.get(facts.cache_group)
        if isinstance(capacity, int) and facts.cache_size > capacity:
            out.refuse(
                f"{base}.size",
                f"{format_bytes(facts.cache_size)} is larger than node group "
                f"{facts.cache_group}'s cache ({format_bytes(capacity)}); accepts at most that. "
                "Pick a node group with a larger cache, or set enabled: false.",
            )
