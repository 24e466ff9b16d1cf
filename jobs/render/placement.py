"""What a replica reserves and where it may run: container resources (requests equal limits,
so the pod is Guaranteed and never throttled below what was sized) and required node
affinity for the GPU kind and the capacity type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import quantity_text
from .target import RenderTarget

GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
CAPACITY_VALUES = {"OnDemand": "on-demand", "Spot": "spot"}  # "Any" adds no term


def gpu_of(resources: Mapping[str, Any]) -> Mapping[str, Any] | None:
    accelerator = resources.get("accelerator")
    gpu = accelerator.get("gpu") if isinstance(accelerator, Mapping) else None
    return gpu if isinstance(gpu, Mapping) else None


def container_resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Per node of a replica: cpu, memory and the vendor's GPU count."""
    amounts = {
        "cpu": quantity_text(resources["cpu"]),
        "memory": quantity_text(resources["memory"]),
    }
    gpu = gpu_of(resources)
    if gpu is not None:
        vendor = gpu.get("vendor") or "nvidia"
        amounts[GPU_RESOURCES[vendor]] = str(gpu["countPerReplica"])
    return {"requests": dict(amounts), "limits": dict(amounts)}


def node_affinity(resources: Mapping[str, Any], target: RenderTarget) -> dict[str, Any] | None:
    """Required node affinity, or None when any node with the resources will do."""
    gpu = gpu_of(resources)
    if gpu is None:
        return None
    expressions = []
    kind = target.gpu_kind(gpu.get("model"))
    labels = kind.get("nodeLabels") if kind is not None else None
    if isinstance(labels, Mapping):
        # Sorted, so reordering a catalog entry's labels does not change the rendered object.
        for key in sorted(labels):
            expressions.append({"key": key, "operator": "In", "values": [str(labels[key])]})
    capacity = CAPACITY_VALUES.get(gpu.get("capacityType") or "Any")
    if capacity is not None:
        expressions.append(
            {"key": target.capacity_type_label, "operator": "In", "values": [capacity]}
        )
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }
