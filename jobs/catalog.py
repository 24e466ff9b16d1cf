"""The default machine catalog: the GPU kinds a profile offers, as node groups name them.

GPU memory is what `nvidia-smi` reports per device; node shapes are the common eight-GPU (four
for T4) cloud instances. Admins edit the catalog per profile to match their node groups.
"""

import json
import re
from pathlib import Path

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


def default_machine_catalog() -> list[dict]:
    """A fresh copy, for model field defaults."""
    return [dict(kind, nodeLabels=dict(kind["nodeLabels"])) for kind in DEFAULT_MACHINE_CATALOG]


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
