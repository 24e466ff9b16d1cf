"""Shared manifests and contexts for the manifest tests (pure data, no database)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from jobs.manifest import ExistingApplication, ManifestContext, ModelFacts, ProfileFacts

DELETE = object()

CATALOG = (
    {
        "name": "l4",
        "vendor": "nvidia",
        "gpuMemory": "23034Mi",
        "gpusPerNode": 8,
        "nodeCpu": "192",
        "nodeMemory": "768Gi",
        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L4"},
    },
    {
        "name": "h100",
        "vendor": "nvidia",
        "gpuMemory": "80Gi",
        "gpusPerNode": 8,
        "nodeCpu": "208",
        "nodeMemory": "1800Gi",
    },
    {
        "name": "t4",
        "vendor": "nvidia",
        "gpuMemory": "15Gi",
        "gpusPerNode": 4,
        "nodeCpu": "48",
        "nodeMemory": "192Gi",
    },
    {
        "name": "mi300x",
        "vendor": "amd",
        "gpuMemory": "192Gi",
        "gpusPerNode": 8,
        "nodeCpu": "192",
        "nodeMemory": "2Ti",
    },
)
ALL_ADDONS = frozenset(
    {"kserve", "keda", "kueue", "gatewayApi", "certManager", "localModelCache", "kubevirt"}
)
COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"


def profile(name: str = "prod-inference", **kw: Any) -> ProfileFacts:
    values: dict[str, Any] = {
        "namespace": "ml-serving",
        "backend": "kubernetes",
        "machine_catalog": CATALOG,
        "addons": ALL_ADDONS,
        "queues": ("gpu-queue", "cpu-queue"),
        "cache_node_groups": {"gpu-l4": 500 * 2**30},
        "vllm_version": "0.13.0",
        "extra_namespaces": ("team-a",),  # an admin allowed it besides ml-serving
    }
    values.update(kw)
    return ProfileFacts(name=name, **values)


def context(**kw: Any) -> ManifestContext:
    values: dict[str, Any] = {
        "profiles": {"prod-inference": profile(), "bare": bare_profile()},
        "verified_domains": frozenset({"models.example.com"}),
        "access_policies": frozenset({"default", "partners"}),
    }
    values.update(kw)
    return ManifestContext(**values)


def bare_profile() -> ProfileFacts:
    """A profile with no add-ons, queues or caches: the plain KServe cluster."""
    return profile(
        "bare", namespace="bare-ns", addons=frozenset({"kserve"}), queues=(), cache_node_groups={}
    )


def existing(manifest: dict[str, Any], served: bool = False) -> ExistingApplication:
    return ExistingApplication(
        manifest=manifest,
        created_at=datetime(2025, 3, 4, 10, 30, tzinfo=UTC),
        served_at=datetime(2025, 3, 5, 8, 0, tzinfo=UTC) if served else None,
    )


def model_facts(**kw: Any) -> ModelFacts:
    return ModelFacts(**kw)


SHORTEST = {
    "apiVersion": "servedeck.io/v1",
    "kind": "Application",
    "spec": {
        "name": "bge-embed",
        "profileName": "prod-inference",
        "source": {"type": "Model", "model": {"uri": "hf://BAAI/bge-m3"}},
    },
}

SHORTEST_YAML = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bge-embed
  profileName: prod-inference
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""

# Every block set, valid against context(): the bench uses the same document.
FULL_YAML = f"""\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: qwen-chat
  profileName: prod-inference
  namespace: ml-serving
  syncType: Manual
  access:
    exposure: Domain
    domain: models.example.com
    accessPolicy: partners
  source:
    type: Model
    model:
      uri: hf://Qwen/Qwen2.5-VL-7B-Instruct:{COMMIT}
      format: vLLM
      runtime:
        engine: vllm
        isolation: Container
      engine:
        dtype: bfloat16
        quantization: fp8
        tensorParallelSize: 2
        pipelineParallelSize: 1
        reasoningParser: deepseek_r1
        toolCallParser: hermes
        gpuMemoryUtilization: 0.85
        extraArgs: ["--enable-prefix-caching", "--max-num-batched-tokens=8192"]
      serving:
        apiFormat: OpenAI
        maxContextTokens: 32768
        kvCacheSize: 12Gi
        maxConcurrentRequests: 64
        multimodal:
          maxImagesPerPrompt: 4
          maxVideosPerPrompt: 1
      resources:
        cpu: "6"
        memory: 64Gi
        accelerator:
          gpu:
            vendor: nvidia
            model: l4
            countPerReplica: 2
            capacityType: OnDemand
        nodesPerReplica: 1
      scaling:
        minReplicas: 1
        maxReplicas: 4
        metric:
          requestsWaiting: 3
      queue:
        name: gpu-queue
      cache:
        enabled: true
        size: 17Gi
        nodeGroup: gpu-l4
"""


def doc(base: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """A deep copy of base (SHORTEST) with dotted-path changes: "spec.source.model.format"."""
    out = copy.deepcopy(base if base is not None else SHORTEST)
    for dotted, value in changes.items():
        set_path(out, dotted, value)
    return out


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    if value is DELETE:
        data.pop(keys[-1], None)
    else:
        data[keys[-1]] = value


def get_path(data: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        data = data[key]
    return data


def m(changes: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Changes keyed relative to spec.source.model ("scaling.minReplicas") or absolute."""
    full = {}
    for key, value in changes.items():
        if not key.startswith(("spec", "apiVersion", "kind", "status", "metadata")):
            key = f"spec.source.model.{key}"
        full[key] = value
    out = copy.deepcopy(base if base is not None else SHORTEST)
    for dotted, value in full.items():
        set_path(out, dotted, value)
    return out


GPU = {"resources.accelerator": {"gpu": {"countPerReplica": 1}}}
PARAKEET = "hf://nvidia/parakeet-tdt-0.6b-v3"
# Two h100 nodes per replica, from a PVC: the shape KServe accepts for multi-node.
MULTINODE = {
    "uri": "pvc://models-pvc/llama-3.1-405b",
    "format": "vLLM",
    "resources.accelerator": {"gpu": {"countPerReplica": 8, "model": "h100"}},
    "resources.nodesPerReplica": 2,
}
