"""Time manifest.parse (read + check + fill defaults): a full manifest as YAML text, the
shortest one, and a full one given as a mapping. Prints median and p95 in milliseconds.

Run: .venv/bin/python bench/manifest_bench.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from jobs.manifest import ManifestContext, ProfileFacts, load_document, parse  # noqa: E402
from tests.jobs.manifest.manifest_support import FULL_YAML, SHORTEST_YAML  # noqa: E402

CATALOG = (
    {"name": "l4", "vendor": "nvidia", "gpuMemory": "23034Mi", "gpusPerNode": 8,
     "nodeCpu": "192", "nodeMemory": "768Gi"},
    {"name": "h100", "vendor": "nvidia", "gpuMemory": "80Gi", "gpusPerNode": 8,
     "nodeCpu": "208", "nodeMemory": "1800Gi"},
)  # fmt: skip
CTX = ManifestContext(
    profiles={
        "prod-inference": ProfileFacts(
            name="prod-inference",
            namespace="ml-serving",
            machine_catalog=CATALOG,
            addons=frozenset({"kserve", "keda", "kueue", "localModelCache", "gatewayApi"}),
            queues=("gpu-queue",),
            cache_node_groups={"gpu-l4": 500 * 2**30},
            vllm_version="0.13.0",
        )
    },
    verified_domains=frozenset({"models.example.com"}),
    access_policies=frozenset({"partners"}),
)


def measure(label: str, doc: object, n: int) -> None:
    result = parse(doc, CTX)
    assert result.ok, [str(p) for p in result.refusals]
    for _ in range(min(200, n)):  # warm up
        parse(doc, CTX)
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        parse(doc, CTX)
        times.append((time.perf_counter_ns() - start) / 1e6)
    times.sort()
    p95 = times[int(len(times) * 0.95) - 1]
    print(f"{label:<34} median {statistics.median(times):6.3f} ms   p95 {p95:6.3f} ms   (n={n})")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    loader = "CSafeLoader (libyaml)" if hasattr(yaml, "CSafeLoader") else "SafeLoader (pure)"
    print(f"manifest.parse, YAML via {loader}, Python {sys.version.split()[0]}")
    measure("full manifest, YAML text", FULL_YAML, n)
    measure("shortest manifest, YAML text", SHORTEST_YAML, n)
    measure("full manifest, dict input", load_document(FULL_YAML), n)


if __name__ == "__main__":
    main()
