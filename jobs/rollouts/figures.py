"""The two revisions' figures over a step's window, from the metering rows (UsageMinute's
revision column, written during a rollout). Rows are per minute: the window starts at the
minute the step began (the requests of that minute before it are of the same revisions)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Sum

from jobs.models import UsageMinute
from jobs.rollouts.judge import RevisionFigures
from jobs.usage.histogram import LATENCY_BUCKET_FIELDS, TTFT_BUCKET_FIELDS
from jobs.usage.readers import minute_floor

_SUMMED = (
    "requests",
    "errors_5xx",
    "errors_in_stream",
    "ttft_ms_sum",
    "ttft_count",
    *LATENCY_BUCKET_FIELDS,
    *TTFT_BUCKET_FIELDS,
)


def revision_figures(
    application_id: int, revisions: tuple[int, int], since: datetime
) -> dict[int, RevisionFigures]:
    """Each revision's sums over the rows from the minute of `since` on (no row is newer than
    the current minute)."""
    rows = (
        UsageMinute.objects.filter(
            application_id=application_id,
            revision__in=revisions,
            minute__gte=minute_floor(since),
        )
        .values("revision")
        .annotate(**{f"s_{name}": Sum(name) for name in _SUMMED})
        .order_by()
    )
    found = {row["revision"]: row for row in rows}
    out = {}
    for revision in revisions:
        row = found.get(revision)
        if row is None:
            out[revision] = RevisionFigures(revision)
            continue
        sums = {name: row[f"s_{name}"] or 0 for name in _SUMMED}
        out[revision] = RevisionFigures(
            revision=revision,
            requests=int(sums["requests"]),
            server_errors=int(sums["errors_5xx"] + sums["errors_in_stream"]),
            latency_buckets=tuple(int(sums[name]) for name in LATENCY_BUCKET_FIELDS),
            ttft_ms_sum=float(sums["ttft_ms_sum"]),
            ttft_count=int(sums["ttft_count"]),
            ttft_buckets=tuple(int(sums[name]) for name in TTFT_BUCKET_FIELDS),
        )
    return out
