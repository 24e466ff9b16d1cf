"""The machine catalog: the machines a profile offers. For a cluster, its GPU kinds as node
groups name them (the default below, edited per profile); for the local backend, this machine
as it is, made from what was read of it (machine_catalog, pure: the reading is the caller's).

An entry is a GPU kind (gpuMemory, gpusPerNode of at least 1) or a machine without GPUs
(gpusPerNode 0, no gpuMemory): where a model runs on the CPU, and how much memory it has.
`nodes`, when given, is how many such nodes there are (1 for this machine): sizing spans no
more; left out, a replica may span as many as it needs.
GPU memory is what `nvidia-smi` reports per device; the default node shapes are the common
eight-GPU (four for T4) cloud instances.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def _kind(name, memory, per_node, cpu, node_memory, product):
    return {
        "name": name,
        "vendor": "nvidia",
        "gpuMemory": memory,
        "gpusPerNode": per_node,
        "nodeCpu": cpu,
        "nodeMemory": node_memory,
        "nodeLabels": {GPU_PRODUCT_LABEL: product},
    }


DEFAULT_MACHINE_CATALOG = [
    _kind("t4", "15360Mi", 4, "48", "192Gi", "Tesla-T4"),
    _kind("l4", "23034Mi", 8, "192", "768Gi", "NVIDIA-L4"),
    _kind("a10g", "23028Mi", 8, "192", "768Gi", "NVIDIA-A10G"),
    _kind("l40s", "46068Mi", 8, "192", "1536Gi", "NVIDIA-L40S"),
    _kind("a100-40gb", "40960Mi", 8, "96", "1152Gi", "NVIDIA-A100-SXM4-40GB"),
    _kind("a100-80gb", "81920Mi", 8, "96", "1152Gi", "NVIDIA-A100-SXM4-80GB"),
    _kind("h100", "81559Mi", 8, "192", "2048Gi", "NVIDIA-H100-80GB-HBM3"),
    _kind("h200", "143771Mi", 8, "192", "2048Gi", "NVIDIA-H200"),
    _kind("b200", "183359Mi", 8, "192", "2048Gi", "NVIDIA-B200"),
]


# The PCI device each GPU product is passed through to a KubeVirt virtual machine as: the
# resource name NVIDIA's sandbox device plugin (GPU Operator, vm-passthrough) advertises, which
# the KubeVirt CR's permittedHostDevices must list. A catalog entry's own
# `kubevirtDeviceName` wins (a cluster whose plugin names them otherwise).
KUBEVIRT_DEVICE_KEY = "kubevirtDeviceName"
KUBEVIRT_GPU_DEVICES = {
    "Tesla-T4": "nvidia.com/TU104GL_Tesla_T4",
    "NVIDIA-L4": "nvidia.com/AD104GL_L4",
    "NVIDIA-A10G": "nvidia.com/GA102GL_A10G",
    "NVIDIA-L40S": "nvidia.com/AD102GL_L40S",
    "NVIDIA-A100-SXM4-40GB": "nvidia.com/GA100_A100_SXM4_40GB",
    "NVIDIA-A100-SXM4-80GB": "nvidia.com/GA100_A100_SXM4_80GB",
    "NVIDIA-H100-80GB-HBM3": "nvidia.com/GH100_H100_SXM5_80GB",
    "NVIDIA-H200": "nvidia.com/GH100_H200_SXM_141GB",
}


def kubevirt_device_name(kind: Mapping[str, Any]) -> str | None:
    """The device name a GPU kind is passed through to a virtual machine as, or None when the
    catalog entry names none and its product is not one of the known ones."""
    own = kind.get(KUBEVIRT_DEVICE_KEY)
    if isinstance(own, str) and own.strip():
        return own.strip()
    labels = kind.get("nodeLabels")
    product = labels.get(GPU_PRODUCT_LABEL) if isinstance(labels, Mapping) else None
    return KUBEVIRT_GPU_DEVICES.get(product) if isinstance(product, str) else None


def unpermitted_gpu_kinds(
    catalog: Iterable[Any], permitted: Iterable[str]
) -> list[tuple[str, str | None]]:
    """The catalog's GPU kinds a virtual machine cannot have, as (name, device name): their
    device is not among the `permitted` ones (KubeVirt's permittedHostDevices), or they name no
    device (None)."""
    allowed = set(permitted)
    found = []
    for kind in gpu_kinds(catalog):
        device = kubevirt_device_name(kind)
        if device not in allowed:
            found.append((str(kind["name"]), device))
    return found


def default_machine_catalog() -> list[dict]:
    """A fresh copy, for model field defaults."""
    return [dict(kind, nodeLabels=dict(kind["nodeLabels"])) for kind in DEFAULT_MACHINE_CATALOG]


def is_default_catalog(catalog: Any) -> bool:
    """The catalog is the default one as shipped (a local profile made before discovery)."""
    return catalog == DEFAULT_MACHINE_CATALOG


# ---- GPU kinds and machines without GPUs ----

CPU_MACHINE = "cpu"  # the name of this machine's entry when it runs models on its CPU


def is_gpu_kind(kind: Mapping[str, Any]) -> bool:
    """A GPU kind, not a machine without GPUs (gpusPerNode 0); gpusPerNode left out is 1."""
    return kind.get("gpusPerNode", 1) != 0


def gpu_kinds(catalog: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The catalog's GPU kinds (entries that are mappings with a name)."""
    return [k for k in _named(catalog) if is_gpu_kind(k)]


def cpu_machines(catalog: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The catalog's machines without GPUs: where a model may run on the CPU."""
    return [k for k in _named(catalog) if not is_gpu_kind(k)]


def gpu_kind_named(catalog: Iterable[Any], name: Any) -> Mapping[str, Any] | None:
    """The catalog's GPU kind called `name` (a manifest's gpu.model), or None: no such kind,
    or no name (any GPU)."""
    if not isinstance(name, str):
        return None
    return next((kind for kind in gpu_kinds(catalog) if kind["name"] == name), None)


def _named(catalog: Iterable[Any]) -> list[Mapping[str, Any]]:
    return [k for k in catalog or () if isinstance(k, Mapping) and isinstance(k.get("name"), str)]


# ---- this machine, as read ----

MIB = 2**20


@dataclass(frozen=True)
class GpuReading:
    """One GPU as nvidia-smi names it ("NVIDIA L4") and its memory in MiB."""

    product: str
    memory_mib: int


@dataclass(frozen=True)
class MachineReadings:
    """What was read of this machine: usable cores, memory in bytes, its NVIDIA GPUs."""

    cores: int
    memory_bytes: int
    gpus: tuple[GpuReading, ...] = ()


def gpu_kind_name(product: str) -> str:
    """A catalog name for a GPU product: the default catalog's where it lists the product
    (NVIDIA-L4 -> l4), else the product in lowercase words ("NVIDIA GeForce RTX 4090" ->
    geforce-rtx-4090)."""
    label = product.strip().replace(" ", "-")
    for kind in DEFAULT_MACHINE_CATALOG:
        if kind["nodeLabels"][GPU_PRODUCT_LABEL].lower() == label.lower():
            return kind["name"]
    words = re.sub(r"^((nvidia|tesla)\s+)+", "", product.strip(), flags=re.IGNORECASE)
    name = re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-")
    return name[:63].rstrip("-") or "gpu"


def machine_catalog(readings: MachineReadings) -> list[dict]:
    """The catalog of a local profile: one GPU kind per GPU product this machine has (as
    many per node as it has of them), then the machine itself for the CPU. Every entry
    carries the machine's cores and memory: a replica on a GPU shares them too."""
    cores = str(max(1, readings.cores))
    memory = f"{max(0, readings.memory_bytes) // MIB}Mi"
    counts = Counter(gpu.product.strip() for gpu in readings.gpus)
    smallest: dict[str, int] = {}
    for gpu in readings.gpus:
        product = gpu.product.strip()
        smallest[product] = min(smallest.get(product, gpu.memory_mib), gpu.memory_mib)
    entries: list[dict] = []
    for product, count in counts.items():
        entries.append(
            {
                "name": gpu_kind_name(product),
                "vendor": "nvidia",
                "gpuMemory": f"{smallest[product]}Mi",
                "gpusPerNode": count,
                "nodes": 1,
                "nodeCpu": cores,
                "nodeMemory": memory,
                "nodeLabels": {GPU_PRODUCT_LABEL: product.replace(" ", "-")},
            }
        )
    entries.append(
        {"name": CPU_MACHINE, "gpusPerNode": 0, "nodes": 1, "nodeCpu": cores, "nodeMemory": memory}
    )
    return entries


def describe_machine(readings: MachineReadings, gpu_problem: str | None = None) -> str:
    """What was read, in words: "2 cores, 7.7 GiB of memory, no GPU (nvidia-smi is not ...)"."""
    counts = Counter(gpu.product.strip() for gpu in readings.gpus)
    gpus = ", ".join(f"{count} x {product}" for product, count in counts.items())
    if not gpus:
        gpus = "no GPU" + (f" ({gpu_problem})" if gpu_problem else "")
    memory = readings.memory_bytes / 2**30
    return f"{readings.cores} cores, {memory:.1f} GiB of memory, {gpus}"


def describe_catalog(catalog: Sequence[Any]) -> str:
    """The catalog in a few words, for tables: GPU kinds by name, else "CPU only"."""
    names = [str(k["name"]) for k in gpu_kinds(catalog)]
    if names:
        return ", ".join(names)
    machines = cpu_machines(catalog)
    if machines:
        shape = machines[0]
        return f"none (CPU only: {shape.get('nodeCpu', '?')} cores, {shape.get('nodeMemory', '?')})"
    return "none (CPU only)"


# The vLLM architectures data file is models_catalog's; it is read here by path (plain data),
# so that jobs imports nothing of models_catalog (which imports jobs).
VLLM_DATA_FILE = (
    Path(__file__).resolve().parent.parent / "models_catalog" / "data" / "vllm_architectures.json"
)
FALLBACK_VLLM_VERSION = "0.13.0"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def newest_known_vllm_version() -> str:
    """The newest vLLM version the architectures data file knows: a new profile's default
    where its cluster's serving runtime cannot be read."""
    try:
        versions = json.loads(VLLM_DATA_FILE.read_text())["versions"]
    except (OSError, ValueError, KeyError, TypeError):
        return FALLBACK_VLLM_VERSION
    known = [v for v in versions if isinstance(v, str) and _version_key(v)]
    return max(known, key=_version_key) if known else FALLBACK_VLLM_VERSION


def vllm_version_of_image(image: str) -> str | None:
    """The vLLM version a runtime image names, or None: the tag of an image named vllm
    (vllm/vllm-openai:v0.11.2 -> 0.11.2), or a tag naming vllm (…:v0.15.2-vllm0.11.2). Tags
    such as latest or a digest name no version."""
    reference = image.split("@", 1)[0]
    repository, _, tag = reference.rpartition(":")
    if not repository or "/" in tag:  # no tag (a registry port is not one)
        return None
    said = re.search(r"vllm-?v?(\d+\.\d+(?:\.\d+)?)", tag, re.IGNORECASE)
    if said:
        return said[1]
    if "vllm" not in repository.rsplit("/", 1)[-1].lower():
        return None
    found = re.fullmatch(r"v?(\d+\.\d+(?:\.\d+)?)(?:[-+.].*)?", tag)
    return found[1] if found else None
