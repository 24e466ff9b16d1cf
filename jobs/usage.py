"""Usage as readers see it: the per-minute rows of an application or an API key over the last N
minutes, every minute present (zeros where nothing was answered), with totals; p50/p95 come
from the merged latency histograms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet, Sum

from jobs.gateway.counters import COUNTER_FIELDS, figures

DEFAULT_MINUTES = 60
MAX_MINUTES = 24 * 60

# Annotation names may not repeat the model's field names, hence the prefix.
SUMS = {f"sum_{name}": Sum(name) for name in COUNTER_FIELDS}


def sums_of(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[f"sum_{name}"] or 0 for name in COUNTER_FIELDS}


def minute_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def report(rows: QuerySet, minutes: int, now: datetime | None = None) -> dict[str, Any]:
    """The last `minutes` minutes (the current one included) of the UsageMinute rows given,
    summed per minute over applications and keys, and the totals of the span."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes is {minutes}; accepts 1 to {MAX_MINUTES}")
    last = minute_floor(now or datetime.now(UTC))
    first = last - timedelta(minutes=minutes - 1)
    per_minute = {
        minute_floor(row["minute"]): sums_of(row)
        for row in rows.filter(minute__gte=first, minute__lte=last)
        .values("minute")
        .annotate(**SUMS)
        .order_by()
    }
    totals = dict.fromkeys(COUNTER_FIELDS, 0)
    out = []
    for step in range(minutes):
        minute = first + timedelta(minutes=step)
        sums = per_minute.get(minute)
        if sums:
            for name in COUNTER_FIELDS:
                totals[name] += sums[name]
        out.append({"minute": minute, **figures(sums or {})})
    return {
        "from": first,
        "to": last + timedelta(minutes=1),
        "rows": out,
        "totals": figures(totals),
    }
