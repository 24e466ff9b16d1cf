"""Usage as readers see it: the per-minute rows of an application or an API key over the last N
minutes, every minute present (zeros where nothing was answered), with totals; p50/p95 come
from the merged latency histograms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet, Sum

from jobs.usage.counters import COUNTER_FIELDS, figures

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


# -- the overview's cards and the health view ------------------------------------------------
# One place for what "success rate", "requests per minute" and "tokens per second" mean: the
# overview's cards, the health page and GET /api/v1/applications/<name>/health all read these.

CARD_MINUTES = 5  # the live cards: the last five minutes, the current one included
HEALTH_WINDOWS = {"5m": 5, "24h": MAX_MINUTES}


def window_totals(rows: QuerySet, minutes: int, now: datetime | None = None) -> dict[str, Any]:
    """The summed counters of the last `minutes` minutes (the current one included) of the
    UsageMinute rows given, in one aggregate query, and the seconds the window has lasted."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes is {minutes}; accepts 1 to {MAX_MINUTES}")
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    first = minute_floor(moment) - timedelta(minutes=minutes - 1)
    sums = sums_of(rows.filter(minute__gte=first, minute__lte=moment).aggregate(**SUMS))
    return {"sums": sums, "seconds": max((moment - first).total_seconds(), 1.0)}


def totals_per_adapter(
    rows: QuerySet, minutes: int, now: datetime | None = None
) -> tuple[dict[str, dict[str, Any]], float]:
    """The summed counters of the last `minutes` minutes (the current one included, at most
    ADAPTER_MAX_MINUTES) of the UsageMinute rows given, per LoRA adapter ("": the base model's
    own requests), in one grouped query; and the seconds the window has lasted."""
    if not 1 <= minutes <= ADAPTER_MAX_MINUTES:
        raise ValueError(f"minutes is {minutes}; accepts 1 to {ADAPTER_MAX_MINUTES}")
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    first = minute_floor(moment) - timedelta(minutes=minutes - 1)
    grouped = (
        rows.filter(minute__gte=first, minute__lte=moment)
        .values("adapter")
        .annotate(**SUMS)
        .order_by()
    )
    per_adapter = {row["adapter"]: sums_of(row) for row in grouped}
    return per_adapter, max((moment - first).total_seconds(), 1.0)


ADAPTER_MAX_MINUTES = 7 * 24 * 60  # the model page's Adapters section: the cost section's week


def rates(sums: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What the cards and the health view show of summed counters over `seconds`.

    Success rate counts 5xx answers and errors inside 200 streams as failures; 4xx answers are
    the caller's mistakes (a bad key, a bad body) and count as answered. None where nothing
    was asked (no rate of nothing)."""
    shown = figures(sums)
    requests = shown["requests"]
    failures = shown["errors_5xx"] + shown["errors_in_stream"]
    return {
        **shown,
        "seconds": seconds,
        "requests_per_minute": round(requests * 60 / seconds, 2),
        "success_rate": round((requests - failures) / requests, 4) if requests else None,
        "tokens_per_second": round(shown["completion_tokens"] / seconds, 2),
    }


def live_figures(rows: QuerySet, now: datetime | None = None) -> dict[str, Any]:
    """The overview's live cards: the last CARD_MINUTES minutes of the rows given."""
    window = window_totals(rows, CARD_MINUTES, now)
    return rates(window["sums"], window["seconds"])


def health_windows(rows: QuerySet, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """The health view's windows, by name ("5m", "24h"): one aggregate query each."""
    moment = now or datetime.now(UTC)
    out = {}
    for name, minutes in HEALTH_WINDOWS.items():
        window = window_totals(rows, minutes, moment)
        out[name] = {"minutes": minutes, **rates(window["sums"], window["seconds"])}
    return out


def verdict(phase: str, windows: dict[str, dict[str, Any]]) -> str:
    """One word for a monitor: "down" when not Running; "degraded" when Running but more than
    1% of the last five minutes' requests failed; "healthy" otherwise (idle included)."""
    if phase != "Running":
        return "down"
    rate = windows["5m"]["success_rate"]
    if rate is not None and rate < HEALTHY_SUCCESS_RATE:
        return "degraded"
    return "healthy"


HEALTHY_SUCCESS_RATE = 0.99


def sparkline_counts(
    rows: QuerySet, application_ids: list[int], minutes: int = 60, now: datetime | None = None
) -> dict[int, list[int]]:
    """Requests per minute of each application over the last `minutes` minutes, oldest first,
    zeros where idle: one query for every application given (the dashboard's sparklines)."""
    last = minute_floor(now or datetime.now(UTC))
    first = last - timedelta(minutes=minutes - 1)
    out = {pk: [0] * minutes for pk in application_ids}
    if not application_ids:
        return out
    found = (
        rows.filter(application_id__in=application_ids, minute__gte=first, minute__lte=last)
        .values("application_id", "minute")
        .annotate(total=Sum("requests"))
        .order_by()
    )
    for row in found:
        step = int((minute_floor(row["minute"]) - first).total_seconds() // 60)
        if 0 <= step < minutes:
            out[row["application_id"]][step] += row["total"] or 0
    return out


def health_of(application) -> dict[str, Any]:
    """An application's health: the health page and GET /api/v1/applications/<name>/health
    both show this, so they agree."""
    from jobs.models import UsageMinute  # the models import this module's helpers' callers

    windows = health_windows(UsageMinute.objects.filter(application=application))
    return {
        "name": application.name,
        "status": verdict(application.phase, windows),
        "phase": application.phase,
        "ready_replicas": application.ready_replicas,
        "desired_replicas": application.desired_replicas,
        "windows": windows,
    }
