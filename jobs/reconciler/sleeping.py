"""Scale to zero: an application with minReplicas 0 is put to sleep after scaleToZeroAfter
without a request (the reconciler asks), and woken by the first request (a gateway asks).

Exactly one wake per sleep, whichever gateway process asks first: the claim is one conditional
UPDATE of the application's row (phase Sleeping, no claim yet), which one caller wins. The
reconciler leaves a Sleeping application alone, so nothing observes it as Stopped meanwhile.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from jobs.backends import backend_for
from jobs.backends.base import BackendFailed, Observed
from jobs.backends.local import memory_plan
from jobs.backends.local.machine_check import free_memory
from jobs.lifecycle import record_status
from jobs.manifest.quantity import parse_bytes
from jobs.manifest.view import FilledManifest
from jobs.models import Application, Cluster, Phase, Wake

logger = logging.getLogger(__name__)

# How many of an application's latest wakes its expected wake time is taken from.
RECENT_WAKES = 5


def sleep_after(application: Application) -> int | None:
    """The seconds without a request after which it sleeps; None when it never sleeps."""
    return FilledManifest(application.manifest).sleep_after_seconds


def idle_since(application: Application) -> datetime:
    """Since when nothing asked for it: its latest request, or when its status last changed
    (it came up, it was woken) if that is later."""
    last = application.last_request_at
    return max(last, application.updated_at) if last is not None else application.updated_at


def should_sleep(application: Application, now: datetime) -> bool:
    after = sleep_after(application)
    if after is None or application.phase != Phase.RUNNING:
        return False
    return now - idle_since(application) >= timedelta(seconds=after)


def _verb(backend, name: str, fallback: str):
    """The backend's sleep or wake; a backend without them (local) stops and starts."""
    return getattr(backend, name, None) or getattr(backend, fallback)


def put_to_sleep(application: Application) -> None:
    """Stop its replicas (local: the processes end, their memory freed; Kubernetes: the
    predictor is scaled to zero) and say Sleeping."""
    after = sleep_after(application)
    _verb(backend_for(application.profile), "sleep", "stop")(application)
    with transaction.atomic():
        Application.objects.filter(pk=application.pk).update(wake_requested_at=None)
        application.wake_requested_at = None
        record_status(
            application,
            Observed(
                phase=Phase.SLEEPING,
                reason=(
                    f"{application.name} is sleeping: no request for {after} s "
                    "(scaleToZeroAfter). The next request through the gateway wakes it."
                ),
                endpoint=application.endpoint,
                replica_endpoints=(),
            ),
        )


def sleep_idle(applications, now: datetime | None = None) -> list[Application]:
    """Put every idle sleeping-eligible application of `applications` to sleep; those slept."""
    now = now or timezone.now()
    slept = []
    for application in applications:
        if not should_sleep(application, now):
            continue
        try:
            put_to_sleep(application)
        except Exception:  # one application's trouble must not stop the others
            logger.exception("could not put %s to sleep", application.name)
            continue
        slept.append(application)
    return slept


def claim_wake(application_id: int) -> bool:
    """Whether this caller is the one to wake it: true for exactly one caller per sleep."""
    return bool(
        Application.objects.filter(
            pk=application_id, phase=Phase.SLEEPING, wake_requested_at__isnull=True
        ).update(wake_requested_at=timezone.now())
    )


def wake(application_id: int) -> bool:
    """Wake a sleeping application if this caller wins the claim; whether it did. Its
    replicas start (the backend's start verb) and the wake is recorded for its page."""
    if not claim_wake(application_id):
        return False
    try:
        _start(application_id)
    except Exception:
        # Not left claimed with nothing started: the next request claims it again.
        Application.objects.filter(pk=application_id, phase=Phase.SLEEPING).update(
            wake_requested_at=None
        )
        raise
    return True


def _start(application_id: int) -> None:
    application = Application.objects.select_related("profile__cluster").get(pk=application_id)
    refusal = make_room(application)
    try:
        if refusal:
            raise BackendFailed(refusal, "")
        observed = _verb(backend_for(application.profile), "wake", "start")(application)
    except BackendFailed as failure:
        observed = Observed(
            phase=Phase.FAILED,
            reason=f"{application.name} could not wake: {failure.reason}",
            next_step=failure.next_step,
        )
    with transaction.atomic():
        Wake.objects.create(application=application, requested_at=application.wake_requested_at)
        Application.objects.filter(pk=application_id).update(last_request_at=timezone.now())
        record_status(application, observed)


def expected_wake_seconds(application_id: int) -> float | None:
    """The mean of its latest wakes' times; None before its first."""
    times = [
        w.seconds
        for w in Wake.objects.filter(application_id=application_id, ready_at__isnull=False)[
            :RECENT_WAKES
        ]
    ]
    return sum(times) / len(times) if times else None


def record_requests(latest: dict[int, float]) -> None:
    """The meter's flush: each application's latest request (epoch seconds), one UPDATE each
    and only where it is later than what is stored."""
    for application_id, at in latest.items():
        when = datetime.fromtimestamp(at, tz=UTC)
        Application.objects.filter(pk=application_id).exclude(last_request_at__gte=when).update(
            last_request_at=when
        )


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile of `values` (not empty), `share` from 0 to 1."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1))]


def wake_summary(application: Application, recent: int = 100) -> dict | None:
    """For its page: how often it woke, and its wake times' p50 and p95 in words (over its
    `recent` latest wakes); None for a model that does not sleep (no query then)."""
    if sleep_after(application) is None:
        return None
    wakes = list(Wake.objects.filter(application=application)[:recent])
    times = [w.seconds for w in wakes if w.seconds is not None]
    return {
        "count": Wake.objects.filter(application=application).count(),
        "p50": f"{percentile(times, 0.5):.1f} s" if times else "",
        "p95": f"{percentile(times, 0.95):.1f} s" if times else "",
    }


def _memory_of(application: Application) -> int:
    """The memory its replicas take while awake: resources.memory times the replicas."""
    filled = FilledManifest(application.manifest)
    text = filled.model_get("resources", "memory")
    try:
        each = parse_bytes(str(text)) if text else 2**30
    except (ValueError, TypeError):
        each = 2**30
    return each * filled.replicas


def make_room(application: Application, free: int | None = None) -> str:
    """On the local backend: put idle models with minReplicas 0 to sleep, idle longest first,
    until this one fits in the machine's free memory (memory_plan.py); never one that must
    stay up. The refusal, with the figures, when not enough can be freed; else ""."""
    if application.profile.cluster.backend != Cluster.Backend.LOCAL:
        return ""
    others = [
        a
        for a in Application.objects.filter(
            profile__cluster__backend=Cluster.Backend.LOCAL, phase=Phase.RUNNING
        )
        .exclude(pk=application.pk)
        .select_related("profile__cluster")
    ]
    running = [
        memory_plan.Running(
            str(a.pk), _memory_of(a), idle_since(a).timestamp(), sleep_after(a) is not None
        )
        for a in others
    ]
    free = free_memory() if free is None else free
    planned = memory_plan.plan(str(application.pk), _memory_of(application), free, running)
    by_key = {str(a.pk): a for a in others}
    for key in planned.to_sleep:
        put_to_sleep(by_key[key])
    return planned.refusal.replace(str(application.pk), application.name, 1)
