"""A benchmark level's figures from its requests' samples: percentiles, throughput, errors.
Pure: samples in, figures out.

    summarise(1, samples, seconds=12.5)  # -> LevelFigures(requests=8, errors=0, ...)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Sample:
    """One request of a benchmark, as the load saw it (times in seconds from its start)."""

    ok: bool
    latency: float
    ttft: float | None = None  # streams: to the first content event
    gaps: list[float] = field(default_factory=list)  # per token after the first (streams)
    output_tokens: int = 0
    error: str = ""  # what a failed request was answered, shortened


@dataclass(frozen=True, slots=True)
class LevelFigures:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    output_tokens: int
    output_tokens_per_second: float | None
    requests_per_second: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between the closest ranks (numpy's
    default); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q is {q}; accepts 0 to 100")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def summarise(
    concurrency: int, samples: Sequence[Sample], seconds: float, streams: bool
) -> LevelFigures:
    """The level's figures. Percentiles are of the requests that succeeded; throughput is what
    they produced over the level's wall time."""
    good = [s for s in samples if s.ok]
    tokens = sum(s.output_tokens for s in good)
    wall = max(seconds, 1e-9)
    ttfts = [s.ttft for s in good if s.ttft is not None]
    gaps = [gap for s in good for gap in s.gaps]
    latencies = [s.latency for s in good]
    return LevelFigures(
        concurrency=concurrency,
        requests=len(samples),
        errors=len(samples) - len(good),
        seconds=round(seconds, 3),
        output_tokens=tokens,
        output_tokens_per_second=round(tokens / wall, 3) if streams else None,
        requests_per_second=round(len(good) / wall, 3),
        ttft_p50_ms=_ms(percentile(ttfts, 50)),
        ttft_p95_ms=_ms(percentile(ttfts, 95)),
        itl_p50_ms=_ms(percentile(gaps, 50)),
        itl_p95_ms=_ms(percentile(gaps, 95)),
        latency_p50_ms=_ms(percentile(latencies, 50)),
        latency_p95_ms=_ms(percentile(latencies, 95)),
    )
