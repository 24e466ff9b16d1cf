"""The overview's chart data: an application's per-minute usage rows over 1 hour, 24 hours or 7
days, summed in the database into buckets (1 minute, 5 minutes, 1 hour), and its usage per API
key over the same window.

A chart point is the one JSON shape both the chart data endpoint and the live consumer send
(`chart_point` below is the only place that makes one):

    {"t": "2026-12-01T15:04:00+00:00",   # the bucket's start (UTC, ISO 8601)
     "seconds": 60,                       # the bucket's length
     "requests": 12,                      # every answered request
     "s2xx": 10, "s4xx": 1, "s5xx": 1,    # by status class (2xx = the rest of requests)
     "streamErrors": 0,                   # 200 streams that carried an error event
     "p50": 8.1, "p95": 41.0,             # latency percentiles in ms (null when no request)
     "tokensPerSecond": 3.2,              # completion tokens / seconds
     "promptTokens": 90, "completionTokens": 192}

A point is the bucket's totals so far, never a delta: a page that receives a point whose "t"
it already has replaces that point (the latest wins), and appends one it has not. The page
dispatches each received point as the DOM event `servedeck:chart-points` whose detail is
{"points": [point, ...]}; a point for a minute inside a longer bucket (24 h, 7 d) makes the
page read the window again (percentiles do not add up).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import ExtractMinute, Floor, TruncHour

from accesspolicies.problems import Invalid
from jobs.gateway.counters import figures
from jobs.usage import SUMS, minute_floor, sums_of


@dataclass(frozen=True)
class Window:
    name: str
    label: str
    minutes: int
    step: int  # minutes per bucket; divides 60

    @property
    def buckets(self) -> int:
        return self.minutes // self.step


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("1h", "1 hour", 60, 1),
        Window("24h", "24 hours", 24 * 60, 5),
        Window("7d", "7 days", 7 * 24 * 60, 60),
    )
}
DEFAULT_WINDOW = "1h"


class BadWindow(Invalid):
    """A window no chart has: a 400 naming the field, the value and what is accepted."""


def window_named(name: str | None) -> Window:
    """The window a request names (1h when it names none), or BadWindow saying what is."""
    if name in (None, ""):
        return WINDOWS[DEFAULT_WINDOW]
    window = WINDOWS.get(name)
    if window is None:
        shown = repr(name if len(name) <= 20 else name[:20] + "…")
        raise BadWindow(
            "window",
            f"{shown} is not a chart window; accepted {', '.join(WINDOWS)} "
            "(1 hour, 24 hours, 7 days).",
        )
    return window


def bucket_start(moment: datetime, step: int) -> datetime:
    minute = minute_floor(moment)
    return minute.replace(minute=minute.minute - minute.minute % step)


def span(window: Window, now: datetime) -> tuple[datetime, datetime]:
    """The first bucket's start and the current bucket's start."""
    last = bucket_start(now, window.step)
    return last - timedelta(minutes=window.step * (window.buckets - 1)), last


def chart_point(start: datetime, sums: Mapping[str, Any], seconds: int) -> dict[str, Any]:
    """One point of the charts from summed counters (keyed by COUNTER_FIELDS)."""
    got = figures(sums)
    errors = got["errors_4xx"] + got["errors_5xx"]
    return {
        "t": start.astimezone(UTC).isoformat(),
        "seconds": seconds,
        "requests": got["requests"],
        "s2xx": max(0, got["requests"] - errors),
        "s4xx": got["errors_4xx"],
        "s5xx": got["errors_5xx"],
        "streamErrors": got["errors_in_stream"],
        "p50": got["latency_p50_ms"],
        "p95": got["latency_p95_ms"],
        "tokensPerSecond": round(got["completion_tokens"] / seconds, 3) if seconds else 0.0,
        "promptTokens": got["prompt_tokens"],
        "completionTokens": got["completion_tokens"],
    }


def _bucketed(rows: QuerySet, window: Window) -> dict[datetime, dict[str, Any]]:
    """One query: the rows summed per bucket, keyed by the bucket's start."""
    if window.step == 1:
        grouped = rows.values("minute").annotate(**SUMS).order_by()
        return {minute_floor(row["minute"]): sums_of(row) for row in grouped}
    grouped = (
        rows.annotate(
            bucket_hour=TruncHour("minute", tzinfo=UTC),
            bucket_part=Floor(ExtractMinute("minute", tzinfo=UTC) / window.step),
        )
        .values("bucket_hour", "bucket_part")
        .annotate(**SUMS)
        .order_by()
    )
    out = {}
    for row in grouped:
        start = minute_floor(row["bucket_hour"]) + timedelta(
            minutes=int(row["bucket_part"]) * window.step
        )
        out[start] = sums_of(row)
    return out


def chart_points(rows: QuerySet, window: Window, now: datetime | None = None) -> list[dict]:
    """Every bucket of the window, oldest first (zeros where nothing was answered)."""
    first, last = span(window, now or datetime.now(UTC))
    sums = _bucketed(
        rows.filter(minute__gte=first, minute__lt=last + timedelta(minutes=window.step)), window
    )
    seconds = window.step * 60
    return [
        chart_point(start, sums.get(start, {}), seconds)
        for start in (first + timedelta(minutes=window.step * i) for i in range(window.buckets))
    ]


def usage_per_key(rows: QuerySet, window: Window, now: datetime | None = None) -> list[dict]:
    """The window's usage per API key, the busiest first; requests no key made are "none"."""
    first, last = span(window, now or datetime.now(UTC))
    grouped = (
        rows.filter(minute__gte=first, minute__lt=last + timedelta(minutes=window.step))
        .values("api_key_id", "api_key__name")
        .annotate(**SUMS)
        .order_by()
    )
    keys = []
    for row in grouped:
        got = figures(sums_of(row))
        keys.append(
            {
                "key": row["api_key__name"]
                or ("(deleted key)" if row["api_key_id"] else "(no key)"),
                "requests": got["requests"],
                "errors": got["errors_4xx"] + got["errors_5xx"],
                "promptTokens": got["prompt_tokens"],
                "completionTokens": got["completion_tokens"],
                "tokens": got["prompt_tokens"] + got["completion_tokens"],
            }
        )
    return sorted(keys, key=lambda k: (-k["requests"], k["key"]))


def chart_data(rows: QuerySet, window: Window, now: datetime | None = None) -> dict[str, Any]:
    """What the chart data endpoint answers for the usage rows of one application."""
    now = now or datetime.now(UTC)
    first, last = span(window, now)
    return {
        "window": window.name,
        "stepSeconds": window.step * 60,
        "from": first.isoformat(),
        "to": (last + timedelta(minutes=window.step)).isoformat(),
        "points": chart_points(rows, window, now),
        "keys": usage_per_key(rows, window, now),
    }
