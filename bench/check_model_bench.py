"""Check model, cold: median time and bytes read from the Hub per check, against the fake Hub.

    .venv/bin/python bench/check_model_bench.py [--runs 20]

Targets: under 300 ms and under 256 KB per check. The in-process cache is cleared before
every run, so each check asks the Hub again. A second table reads the safetensors headers
(a Hub that sends no safetensors summary in its model info) for comparison: every header of
a small checkpoint, the index's total_size and two headers of a big one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.machine_catalog import DEFAULT_MACHINE_CATALOG  # noqa: E402
from models_catalog import hub  # noqa: E402
from models_catalog.check import check_model  # noqa: E402
from tests.fakes.hub import GOOD_TOKEN, FakeHub  # noqa: E402

MODELS = ("hf://meta-llama/Llama-3.1-8B-Instruct", "hf://deepseek-ai/DeepSeek-V3")
TARGET_MS, TARGET_BYTES = 300, 256 * 1024


def measure(fake: FakeHub, uri: str, runs: int) -> tuple[float, int, int, str]:
    """Median ms, bytes and requests per cold check, and the verdict."""
    times, sizes, counts, verdict = [], [], [], ""
    for _ in range(runs + 1):  # the first run warms imports and the connection pool
        hub.clear_cache()
        fake.reset_log()
        started = time.perf_counter()
        result = check_model(
            uri, catalog=DEFAULT_MACHINE_CATALOG, hf_token=GOOD_TOKEN, hf_endpoint=fake.url
        )
        times.append((time.perf_counter() - started) * 1000)
        sizes.append(fake.bytes_sent())
        counts.append(len(fake.requests))
        verdict = f"{result.verdict} {result.suggestion.describe() if result.suggestion else ''}"
    return statistics.median(times[1:]), max(sizes[1:]), max(counts[1:]), verdict


def table(title: str, fake: FakeHub, runs: int) -> None:
    print(f"\n{title}")
    print(f"{'model':42} {'median ms':>9} {'bytes':>9} {'requests':>8}  verdict")
    for uri in MODELS:
        ms, size, count, verdict = measure(fake, uri, runs)
        marks = ("" if ms < TARGET_MS else " (over time)") + (
            "" if size < TARGET_BYTES else " (over bytes)"
        )
        print(f"{uri[5:]:42} {ms:9.1f} {size:9,} {count:8}  {verdict}{marks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="cold checks per model")
    runs = parser.parse_args().runs
    print(f"Check model, {runs} cold runs each; targets < {TARGET_MS} ms, < {TARGET_BYTES:,} B")
    for summaries, title in (
        (True, "Hub with safetensors summaries (as huggingface.co answers model info):"),
        (
            False,
            "Hub without summaries (headers read with Range requests; past 8 shards the "
            "index's total_size and two headers):",
        ),
    ):
        fake = FakeHub(hub_summaries=summaries)
        fake.prepare()  # synthesize the fake's files before timing
        with fake.serve():
            table(title, fake, runs)


if __name__ == "__main__":
    main()
