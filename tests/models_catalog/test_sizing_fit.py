"""Where a model is suggested to run, from its facts and the profile's catalog (pure): only
what the catalog has, the CPU of a machine without GPUs when no GPU kind holds it, a single
machine never spanned as nodes, and the figures per GPU. Memory worked out beside each case."""

import json
from pathlib import Path

import pytest

from jobs.machine_catalog import (
    DEFAULT_MACHINE_CATALOG,
    GpuReading,
    MachineReadings,
    machine_catalog,
)
from models_catalog.check_types import CheckResult
from models_catalog.sizing import (
    Demand,
    GiB,
    KiB,
    MiB,
    cpu_replica_bytes,
    human_bytes,
    kv_cache_bytes,
    model_shape,
    size_on_catalog,
)

REPOS = Path(__file__).parents[1] / "fakes" / "hub_repos"
LLAMA_8B_WEIGHTS = 8_030_261_248 * 2  # bfloat16
DEEPSEEK_WEIGHTS = 688_574_839_360


def config(repo: str) -> dict:
    return json.loads((REPOS / repo / "config.json").read_text())


def llama(tokens: int) -> Demand:
    shape = model_shape(config("meta-llama/Llama-3.1-8B-Instruct"))
    return Demand(LLAMA_8B_WEIGHTS, kv_cache_bytes(shape, tokens), shape, 0.9)


def deepseek() -> Demand:
    shape = model_shape(config("deepseek-ai/DeepSeek-V3"))
    return Demand(DEEPSEEK_WEIGHTS, kv_cache_bytes(shape, 163840), shape, 0.9)


def laptop(gib: int, cores: int = 8, gpus=()) -> list[dict]:
    return machine_catalog(MachineReadings(cores=cores, memory_bytes=gib * GiB, gpus=gpus))


L4 = GpuReading("NVIDIA L4", 23034)  # 24.15e9 B
ONE_L4_ANY_NODES = [dict(laptop(64, gpus=(L4,))[0], nodes=None)]  # as a cluster says it

# Llama-3.1-8B on the CPU: (16_060_522_496 + 1 GiB) x 4/3 = 21.3 GiB -> 22 GiB at 8192 tokens
# (its KV cache, 1 GiB, x 4 is less); at 131072 tokens the KV cache is 16 GiB, x 4 = 64 GiB.
FITS = [
    # (demand, catalog, suggestion or None, (unfit name, words of why) or None)
    pytest.param(llama(8192), laptop(32), "CPU (22Gi memory)", None, id="cpu-holds-it"),
    pytest.param(
        llama(8192),
        laptop(16),
        None,
        ("cpu", "needs 22.0 GiB of memory on the CPU; cpu has 16.0 GiB"),
        id="cpu-too-small",
    ),
    pytest.param(
        llama(131072),
        laptop(32),
        None,
        ("cpu", "needs 64.0 GiB of memory on the CPU"),
        id="long-context-kv-on-cpu",
    ),
    # 8192 tokens: (16.06e9 + 1 GiB + 2 GiB) / 0.9 = 21.4e9 B on one l4 of 24.15e9
    pytest.param(llama(8192), laptop(64, gpus=(L4,)), "1 x l4 GPU", None, id="gpu-first"),
    # 131072 tokens needs 39.3e9 B on one GPU, and this machine is one node with one l4
    pytest.param(
        llama(131072),
        laptop(128, cores=16, gpus=(L4,)),
        "CPU (64Gi memory)",
        ("l4", "even with 1 GPU;"),
        id="one-machine-is-never-two-nodes",
    ),
    # the same l4 in a cluster's catalog (no nodes given) spans two nodes
    pytest.param(llama(131072), ONE_L4_ANY_NODES, "1 x l4 GPU on each of 2 nodes", None,
                 id="cluster-kind-spans-nodes"),
    # a catalog of GPU kinds only never suggests the CPU
    pytest.param(llama(8192), DEFAULT_MACHINE_CATALOG, "1 x a10g GPU", None, id="default"),
    pytest.param(
        deepseek(),
        laptop(64, gpus=(L4,)),
        None,
        # (688_574_839_360 + 1 GiB) x 4/3 = 919.5e9 B = 856.4 GiB, rounded up to 857
        ("cpu", "needs 857.0 GiB of memory on the CPU; cpu has 64.0 GiB"),
        id="deepseek-nowhere-here",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("demand", "catalog", "where", "unfit"), FITS)
def test_suggestions_fit_the_catalog(demand, catalog, where, unfit):
    sizing = size_on_catalog(demand, catalog, nvidia_only=True)
    assert (sizing.suggestion.describe() if sizing.suggestion else None) == where
    names = {kind["name"] for kind in catalog}
    if sizing.suggestion is not None and sizing.suggestion.accelerator == "gpu":
        assert sizing.suggestion.gpu_kind in names
    if unfit is not None:
        name, words = unfit
        assert words in dict(sizing.unfit)[name]


@pytest.mark.parametrize(
    ("weights", "kv", "expected"),
    [
        (0, 0, 2 * GiB),  # the runtime alone, 1 GiB x 4/3, rounded up
        (2 * GiB, 0, 4 * GiB),  # 3 GiB x 4/3 = 4 GiB exactly
        (2 * GiB + 1, 0, 5 * GiB),
        (GiB, 3 * GiB, 12 * GiB),  # the KV cache's quarter decides
    ],
)
def test_cpu_replica_bytes(weights, kv, expected):
    assert cpu_replica_bytes(weights, kv) == expected


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (None, "unknown"),
        (0, "0 B"),
        (900, "900 B"),
        (1023, "1.0 KiB"),  # 0.999 KiB rounds to 1.0: said in KiB
        (12 * KiB, "12.0 KiB"),  # Qwen2.5-0.5B's KV cache per token, not "0.0 MiB"
        (56 * KiB, "56.0 KiB"),
        (1536 * KiB, "1.5 MiB"),
        (1023 * MiB + 1000 * KiB, "1.0 GiB"),  # rounds to 1024.0 MiB: said in GiB
        (int(727.5 * GiB), "727.5 GiB"),
        (2 * 1024 * GiB, "2.0 TiB"),
    ],
)
def test_one_byte_format(n, text):
    assert human_bytes(n) == text


def result_for(demand: Demand, catalog, context: int) -> CheckResult:
    sizing = size_on_catalog(demand, catalog, nvidia_only=True)
    return CheckResult(
        uri="hf://x/y",
        can_serve=sizing.suggestion is not None,
        verdict="",
        next_step="",
        context_tokens=context,
        memory_needed_bytes=sizing.memory_needed_bytes,
        cpu_memory_bytes=sizing.cpu_memory_bytes,
        suggestion=sizing.suggestion,
    )


def test_per_gpu_figures_are_per_gpu():
    """DeepSeek-V3 on 8 h200: 111_708_899_352 B per GPU (104.0 GiB), 832.3 GiB over the eight;
    the 727.5 GiB one GPU would need is no GPU's figure."""
    result = result_for(deepseek(), DEFAULT_MACHINE_CATALOG, 163840)
    assert result.memory_text() == (
        "104.0 GiB per GPU on 8 x h200 GPUs at 163840 tokens, 832.3 GiB in all"
    )
    assert human_bytes(result.memory_needed_bytes) == "727.5 GiB"


def test_cpu_figure_is_against_the_machine():
    result = result_for(llama(8192), laptop(32), 8192)
    assert result.memory_text() == (
        "22.0 GiB of memory on the CPU at 8192 tokens; the machine has 32.0 GiB"
    )


def test_one_gpu_figure():
    # (16_060_522_496 + 1 GiB KV + 1 GiB + 1 GiB activations) / 0.9 = 21.42e9 B = 19.95 GiB
    result = result_for(llama(8192), laptop(64, gpus=(L4,)), 8192)
    assert result.memory_text() == "20.0 GiB per GPU on 1 x l4 GPU at 8192 tokens"
