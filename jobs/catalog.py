"""The default machine catalog: the GPU kinds a profile offers, as node groups name them.

GPU memory is what `nvidia-smi` reports per device; node shapes are the common eight-GPU (four
for T4) cloud instances. Admins edit the catalog per profile to match their node groups.
"""

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
