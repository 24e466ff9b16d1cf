"""Time render() (filled-in manifest -> KServe objects): parse a full manifest once, then
render it N times; also to_yaml() of the result, and validate() once warm. Prints median and
p95 in milliseconds (target: render under 5 ms).

Run: .venv/bin/python bench/render_bench.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.machine_catalog import default_machine_catalog  # noqa: E402
from jobs.manifest import ManifestContext, ProfileFacts, parse  # noqa: E402
from jobs.render import RenderTarget, render, to_yaml, validate  # noqa: E402

ADDONS = frozenset({"kserve", "keda", "kueue", "gatewayApi", "localModelCache"})
CATALOG = tuple(default_machine_catalog())
CTX = ManifestContext(
    profiles={
        "prod-inference": ProfileFacts(
            name="prod-inference",
            namespace="ml-serving",
            machine_catalog=CATALOG,
            addons=ADDONS,
            queues=("gpu-queue",),
            cache_node_groups={"gpu-l4": 500 * 2**30},
        )
    },
    verified_domains=frozenset({"models.example.com"}),
    access_policies=frozenset({"partners"}),
)
TARGET = RenderTarget(
    namespace="ml-serving", machine_catalog=CATALOG, addons=ADDONS, hf_token_ref="secret/hf-token"
)

# Every block set: cache, Domain route, KEDA scaling, queue, multimodal limits, GPU affinity.
FULL = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: qwen-chat
  profileName: prod-inference
  access: {exposure: Domain, domain: models.example.com, accessPolicy: partners}
  source:
    type: Model
    model:
      uri: hf://Qwen/Qwen2.5-VL-7B-Instruct:5617a9f61b028005a4858fdac845db406aefb181
      engine:
        dtype: bfloat16
        quantization: fp8
        reasoningParser: deepseek_r1
        toolCallParser: hermes
        gpuMemoryUtilization: 0.85
        extraArgs: ["--enable-prefix-caching", "--max-num-batched-tokens=8192"]
      serving:
        maxContextTokens: 32768
        kvCacheSize: 12Gi
        maxConcurrentRequests: 64
        multimodal: {maxImagesPerPrompt: 4, maxVideosPerPrompt: 1}
      resources:
        cpu: "6"
        memory: 64Gi
        accelerator: {gpu: {model: l4, countPerReplica: 2, capacityType: OnDemand}}
      scaling: {minReplicas: 1, maxReplicas: 4, metric: {requestsWaiting: 3}}
      queue: {name: gpu-queue}
      cache: {enabled: true, size: 17Gi, nodeGroup: gpu-l4}
"""


def measure(label: str, call: Callable[[], object], n: int) -> None:
    for _ in range(min(200, n)):  # warm up
        call()
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e6)
    times.sort()
    p95 = times[max(0, int(len(times) * 0.95) - 1)]
    print(f"{label:<36} median {statistics.median(times):7.3f} ms   p95 {p95:7.3f} ms   (n={n})")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    result = parse(FULL, CTX)
    assert result.ok, [str(p) for p in result.refusals]
    manifest = result.manifest
    objects = render(manifest, TARGET, revision=3)
    start = time.perf_counter()
    problems = validate(objects)
    cold = (time.perf_counter() - start) * 1000
    assert problems == [], problems
    print(f"render() of a full manifest, Python {sys.version.split()[0]}")
    measure(f"render ({len(objects)} objects)", lambda: render(manifest, TARGET, revision=3), n)
    measure("render + to_yaml", lambda: to_yaml(render(manifest, TARGET, revision=3)), n)
    print(f"{'validate, first call (reads CRDs)':<36} {cold:7.1f} ms")
    measure("validate, warm", lambda: validate(objects), max(1, n // 10))


if __name__ == "__main__":
    main()
