"""The memory floor of decoding at one request: each new token reads every weight of the model
once, so a runtime cannot stream one request faster than the machine reads its weights.

read_gb_per_s() times torch summing a 1 GiB float32 tensor (a pure read) in a runtime's own
virtualenv, on 1 thread and on the replica's threads, and keeps the best; floor_ms() is the
weights' bytes in the dtype a runtime serves them over that rate. At one request a runtime's
inter-token latency cannot go below its floor, and vLLM's multiple of transformers serve cannot
go above what transformers serve's measured latency makes of vLLM's floor (ceiling()).
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path


@functools.cache  # /proc/cpuinfo read once a runtime, not at every floor printed
def served_bytes(runtime: str) -> int:
    """Bytes a parameter `runtime` holds the packaged model's float32 weights in on this CPU:
    vLLM's CPU build serves engine.dtype `auto`, float32 on a CPU without bfloat16 instructions
    (vllm_cpu.served_dtype), else its own downcast to bfloat16 (its log: "Downcasting
    torch.float32 to torch.bfloat16"); transformers serve keeps config.json's dtype."""
    from jobs.backends.local import vllm_cpu as vc

    if runtime == vc.NAME and vc.served_dtype("auto", vc.cpu_flags()) == "auto":
        return 2
    return 4


READ = """
import json, sys, time, torch
data = torch.ones(2**28)  # 1 GiB of float32, far beyond any cache
best = 0.0
for threads in sorted({1, int(sys.argv[1])}):
    torch.set_num_threads(threads)
    data.sum()
    for _ in range(5):
        started = time.perf_counter()
        data.sum()
        best = max(best, data.numel() * 4 / (time.perf_counter() - started) / 1e9)
print(json.dumps(best))
"""


def read_gb_per_s(python: Path, threads: int) -> float:
    """The best read rate (GB/s) torch reaches here, run by `python` (a runtime's virtualenv)."""
    done = subprocess.run(
        [str(python), "-c", READ, str(threads)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring the memory's read rate failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout))


def weights_gb(parameters: int, runtime: str) -> float:
    """The model's weights as `runtime` holds them, in GB: what one decoding step reads."""
    return parameters * served_bytes(runtime) / 1e9


def floor_ms(parameters: int, runtime: str, gb_per_s: float) -> float:
    """The least inter-token latency at one request: the weights read once at `gb_per_s`."""
    return 1000 * weights_gb(parameters, runtime) / gb_per_s


def ceiling(vllm_floor_ms: float, tf_tokens_per_s: float) -> float:
    """The highest vLLM / transformers serve ratio at one request this machine allows: vLLM
    at its floor (a token every `vllm_floor_ms`, no time to its first) over transformers
    serve's measured output tokens/s."""
    return 1000 / vllm_floor_ms / max(tf_tokens_per_s, 1e-9)
