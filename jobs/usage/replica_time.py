"""Replica time as it happens: each time an application's ready replicas change (lifecycle's
record_status, where every observed status is saved), the span at the old count is closed
into per-day ReplicaDay rows; reading adds the span still open. Costs come from these
(jobs.usage.cost)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime

from django.db.models import F
from django.utils import timezone

from jobs.models import Application, ReplicaClock, ReplicaDay
from jobs.usage.cost import split_by_day


def replicas_changed(application: Application, ready: int, now: datetime | None = None) -> None:
    """Close the span at the clock's count and start one at `ready`."""
    now = now or timezone.now()
    clock, created = ReplicaClock.objects.get_or_create(
        application=application, defaults={"ready": ready, "since": now}
    )
    if created:
        return
    if clock.ready and now > clock.since:
        for day, seconds in split_by_day(clock.since, now):
            _add(application, day, seconds * clock.ready)
    clock.ready, clock.since = ready, now
    clock.save(update_fields=["ready", "since"])


def _add(application: Application, day: date, replica_seconds: float) -> None:
    updated = ReplicaDay.objects.filter(application=application, day=day).update(
        replica_seconds=F("replica_seconds") + replica_seconds
    )
    if not updated:
        ReplicaDay.objects.create(application=application, day=day, replica_seconds=replica_seconds)


def replica_seconds_per_day(application: Application, now: datetime | None = None) -> dict:
    """Replica-seconds per UTC day, the open span included (two queries)."""
    now = now or timezone.now()
    days: dict[date, float] = defaultdict(float)
    for day, seconds in ReplicaDay.objects.filter(application=application).values_list(
        "day", "replica_seconds"
    )[:400]:
        days[day] += seconds
    clock = ReplicaClock.objects.filter(application=application).first()
    if clock is not None and clock.ready and now > clock.since:
        for day, seconds in split_by_day(clock.since, now):
            days[day] += seconds * clock.ready
    return dict(days)
