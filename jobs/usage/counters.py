"""The counters of one usage row, in one order shared by the meter's in-process lists, the
UsageMinute columns and the figures a reader sees (requests, errors, tokens, p50/p95)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobs.usage.histogram import BUCKET_COUNT, LATENCY_BUCKET_FIELDS, TTFT_BUCKET_FIELDS, quantile

COUNTER_FIELDS: tuple[str, ...] = (
    "requests",
    "errors_4xx",
    "errors_5xx",
    "errors_in_stream",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms_sum",
    "streams",
    "ttft_ms_sum",
    "ttft_count",
    *LATENCY_BUCKET_FIELDS,
    *TTFT_BUCKET_FIELDS,
)
(
    REQUESTS,
    ERRORS_4XX,
    ERRORS_5XX,
    ERRORS_IN_STREAM,
    PROMPT_TOKENS,
    COMPLETION_TOKENS,
    LATENCY_MS_SUM,
    STREAMS,
    TTFT_MS_SUM,
    TTFT_COUNT,
) = range(10)
FIRST_BUCKET = 10
FIRST_TTFT_BUCKET = FIRST_BUCKET + BUCKET_COUNT
WIDTH = len(COUNTER_FIELDS)


def add_into(total: list, more: Sequence) -> None:
    """Add one counter list into another, in place."""
    for index, value in enumerate(more):
        total[index] += value


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def figures(sums: Mapping[str, Any]) -> dict[str, Any]:
    """What a reader wants of summed counters (keyed by COUNTER_FIELDS): counts, tokens, and
    latency p50/p95 (from the histogram), average latency and time to first token in ms."""
    requests = int(sums.get("requests") or 0)
    buckets = [int(sums.get(name) or 0) for name in LATENCY_BUCKET_FIELDS]
    ttft_count = int(sums.get("ttft_count") or 0)
    return {
        "requests": requests,
        "errors_4xx": int(sums.get("errors_4xx") or 0),
        "errors_5xx": int(sums.get("errors_5xx") or 0),
        "errors_in_stream": int(sums.get("errors_in_stream") or 0),
        "prompt_tokens": int(sums.get("prompt_tokens") or 0),
        "completion_tokens": int(sums.get("completion_tokens") or 0),
        "streams": int(sums.get("streams") or 0),
        "latency_avg_ms": _rounded((sums.get("latency_ms_sum") or 0) / requests)
        if requests
        else None,
        "latency_p50_ms": _rounded(quantile(buckets, 0.5)),
        "latency_p95_ms": _rounded(quantile(buckets, 0.95)),
        "ttft_avg_ms": _rounded((sums.get("ttft_ms_sum") or 0) / ttft_count)
        if ttft_count
        else None,
    }
