"""Fixed latency buckets shared by the per-minute rows and /metrics, and the quantile math.

Buckets are fixed so that histograms from any minutes, keys and processes merge by addition;
a quantile is read from the merged counts by linear interpolation inside its bucket (as
Prometheus' histogram_quantile does)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

# Upper bounds in milliseconds; one more bucket counts everything above the last bound.
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
    60000,
)
BUCKET_COUNT = len(LATENCY_BOUNDS_MS) + 1


def bucket_index(latency_ms: float) -> int:
    """The bucket holding `latency_ms`: the first whose upper bound is >= it (le semantics)."""
    return bisect_left(LATENCY_BOUNDS_MS, latency_ms)


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) in ms of a histogram over LATENCY_BOUNDS_MS; None when empty.

    Inside a bucket the values are taken as spread evenly; the overflow bucket answers the last
    bound (nothing more precise is known of it)."""
    if len(counts) != BUCKET_COUNT:
        raise ValueError(f"a latency histogram has {BUCKET_COUNT} buckets, not {len(counts)}")
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index == len(LATENCY_BOUNDS_MS):
                return float(LATENCY_BOUNDS_MS[-1])
            lower = LATENCY_BOUNDS_MS[index - 1] if index else 0.0
            upper = LATENCY_BOUNDS_MS[index]
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return float(LATENCY_BOUNDS_MS[-1])  # only reached through float rounding of rank


def bucket_field_names(what: str = "latency") -> tuple[str, ...]:
    """The UsageMinute column of each bucket, e.g. latency_le_2_5ms, latency_over_60000ms."""

    def label(bound: float) -> str:
        text = f"{bound:g}".replace(".", "_")
        return f"{what}_le_{text}ms"

    names = [label(bound) for bound in LATENCY_BOUNDS_MS]
    names.append(f"{what}_over_{LATENCY_BOUNDS_MS[-1]:g}ms")
    return tuple(names)


LATENCY_BUCKET_FIELDS = bucket_field_names()
# Streams' time to first token, over the same bounds: a Canary step is judged by its p95.
TTFT_BUCKET_FIELDS = bucket_field_names("ttft")
