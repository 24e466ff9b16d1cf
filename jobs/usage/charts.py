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

from django.core.cache import cache
from django.db.models import Func, IntegerField, QuerySet

from accesspolicies.models import APIKey
from accesspolicies.problems import Invalid
from jobs.usage.counters import figures
from jobs.usage.readers import SUMS, minute_floor, sums_of


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


class BucketNumber(Func):
    """The number of the `step`-minute bucket a timestamp falls in, counted from the Unix
    epoch: native date arithmetic in SQL (Django's Trunc functions run as Python code per row
    on SQLite, ten times slower over a week of rows)."""

    output_field = IntegerField()

    def __init__(self, expression, step: int):
        super().__init__(expression)
        self.step = int(step)

    def as_sqlite(self, compiler, connection, **extra):
        # '%%%%s': Django's template makes it '%%s'; the SQLite backend then makes it '%s'.
        template = f"(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) / {self.step * 60})"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sql(self, compiler, connection, template=None, **extra):
        template = template or (
            f"(CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s)) AS BIGINT) / {self.step * 60})"
        )
        return super().as_sql(compiler, connection, template=template, **extra)


# A bucket that ended this long ago no longer changes (the meter flushes once a second and
# records a request in the minute it ends), so its sums are cached; the open buckets are read
# every time. The timeout bounds how long a late correction could go unseen.
SETTLED_AFTER = timedelta(minutes=2)
CACHE_SECONDS = 3600


def _grouped(
    rows: QuerySet, window: Window, now: datetime, cache_key: str | None = None
) -> list[dict[str, Any]]:
    """The window's rows summed per (bucket, API key): one query over the buckets not cached
    (with `cache_key`, settled buckets come from the cache), plus one for the keys' names."""
    first, _ = span(window, now)
    seconds = window.step * 60
    numbers = [int(first.timestamp()) // seconds + i for i in range(window.buckets)]
    settled = int((now - SETTLED_AFTER).timestamp()) // seconds
    keys = {n: f"charts:{cache_key}:{window.step}:{n}" for n in numbers if n < settled}
    cached = cache.get_many(list(keys.values())) if cache_key else {}
    per_bucket = {n: cached[keys[n]] for n in numbers if keys.get(n) in cached}
    missing = [n for n in numbers if n not in per_bucket]
    if missing:
        low, high = missing[0], missing[-1] + 1
        fresh: dict[int, list] = {n: [] for n in range(low, high)}
        grouped = (
            rows.filter(
                minute__gte=datetime.fromtimestamp(low * seconds, UTC),
                minute__lt=datetime.fromtimestamp(high * seconds, UTC),
            )
            .annotate(bucket=BucketNumber("minute", window.step))
            .values("bucket", "api_key_id")
            .annotate(**SUMS)
            .order_by()
        )
        for row in grouped:
            fresh.setdefault(int(row["bucket"]), []).append((row["api_key_id"], sums_of(row)))
        per_bucket.update(fresh)
        if cache_key:
            cache.set_many({keys[n]: fresh[n] for n in fresh if n in keys}, timeout=CACHE_SECONDS)
    ids = {key for n in numbers for key, _ in per_bucket.get(n, ())}
    names = dict(APIKey.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}
    return [
        {"bucket": n, "api_key_id": key, "api_key__name": names.get(key), **_prefixed(sums)}
        for n in numbers
        for key, sums in per_bucket.get(n, ())
    ]


def _prefixed(sums: Mapping[str, Any]) -> dict[str, Any]:
    return {f"sum_{name}": value for name, value in sums.items()}


def cache_key(application) -> str:
    """What an application's settled buckets are cached under."""
    return f"application-{application.pk}"


def _add(total: dict[str, Any], more: Mapping[str, Any]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _points(grouped: list[dict], window: Window, now: datetime) -> list[dict]:
    first, _ = span(window, now)
    seconds = window.step * 60
    per_bucket: dict[int, dict[str, Any]] = {}
    for row in grouped:
        _add(per_bucket.setdefault(int(row["bucket"]), {}), sums_of(row))
    out = []
    for index in range(window.buckets):
        start = first + timedelta(minutes=window.step * index)
        number = int(start.timestamp()) // seconds
        out.append(chart_point(start, per_bucket.get(number, {}), seconds))
    return out


def _keys(grouped: list[dict]) -> list[dict]:
    per_key: dict[Any, dict[str, Any]] = {}
    names: dict[Any, str] = {}
    for row in grouped:
        key = row["api_key_id"]
        names[key] = row["api_key__name"] or ("(deleted key)" if key else "(no key)")
        _add(per_key.setdefault(key, {}), sums_of(row))
    keys = []
    for key, sums in per_key.items():
        got = figures(sums)
        keys.append(
            {
                "key": names[key],
                "requests": got["requests"],
                "errors": got["errors_4xx"] + got["errors_5xx"],
                "promptTokens": got["prompt_tokens"],
                "completionTokens": got["completion_tokens"],
                "tokens": got["prompt_tokens"] + got["completion_tokens"],
            }
        )
    return sorted(keys, key=lambda k: (-k["requests"], k["key"]))


def chart_points(
    rows: QuerySet, window: Window, now: datetime | None = None, cache_key: str | None = None
) -> list[dict]:
    """Every bucket of the window, oldest first (zeros where nothing was answered)."""
    now = now or datetime.now(UTC)
    return _points(_grouped(rows, window, now, cache_key), window, now)


def latest_points(
    rows: QuerySet, cache_key: str | None = None, count: int = 2, now: datetime | None = None
) -> list[dict]:
    """The newest `count` one-minute points, as the live page extends its charts with."""
    return chart_points(rows, WINDOWS[DEFAULT_WINDOW], now, cache_key=cache_key)[-count:]


def usage_per_key(
    rows: QuerySet, window: Window, now: datetime | None = None, cache_key: str | None = None
) -> list[dict]:
    """The window's usage per API key, the busiest first; requests no key made are "(no key)"."""
    return _keys(_grouped(rows, window, now or datetime.now(UTC), cache_key))


def chart_data(
    rows: QuerySet,
    window: Window,
    now: datetime | None = None,
    cache_key: str | None = None,
    per_key: bool = False,
) -> dict[str, Any]:
    """What the chart data endpoint answers for the usage rows of one application (cache_key
    names them, such as application-<pk>: settled buckets are then cached). The usage per API
    key ("keys") only when `per_key`: key names and their usage are an admin's, as on
    /api/v1/keys/<name>/usage, so a caller passes whether the member may `admin`."""
    now = now or datetime.now(UTC)
    first, last = span(window, now)
    grouped = _grouped(rows, window, now, cache_key)  # the points and the keys from one pass
    data = {
        "window": window.name,
        "stepSeconds": window.step * 60,
        "from": first.isoformat(),
        "to": (last + timedelta(minutes=window.step)).isoformat(),
        "points": _points(grouped, window, now),
    }
    if per_key:
        data["keys"] = _keys(grouped)
    return data
