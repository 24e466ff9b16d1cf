"""What an observed status does to an Application: the fields saved, an Event when the phase
changes, and a message to the application's channel-layer group for live pages.

The reconciler and the verbs both call `record_status`; nothing else writes these fields.
"""

import logging
from functools import partial

from django.db import transaction
from django.utils import timezone

from jobs.backends.base import REPLICAS_FIELD, STATUS_FIELDS, Observed
from jobs.live import groups
from jobs.models import Application, Event, Phase, Wake
from jobs.usage.replica_time import replicas_changed

logger = logging.getLogger(__name__)

TROUBLE = {Phase.FAILED, Phase.PENDING}


def group_name(application: Application) -> str:
    """The channel-layer group a live page of this application listens to."""
    return groups.application_group(application.pk)


def record_status(application: Application, observed: Observed) -> bool:
    """Save what changed; return whether anything did."""
    values = {name: getattr(observed, name) for name in STATUS_FIELDS}
    if observed.replica_endpoints is not None:  # None: this observer does not see them
        values[REPLICAS_FIELD] = list(observed.replica_endpoints)
    changed = [name for name, value in values.items() if getattr(application, name) != value]
    if not changed:
        return False
    old_phase = application.phase
    for name in changed:
        setattr(application, name, values[name])
    application.updated_at = timezone.now()
    fields = [*changed, "updated_at"]
    if observed.phase == Phase.RUNNING and application.served_at is None:
        application.served_at = application.updated_at
        fields.append("served_at")
    application.save(update_fields=fields)
    if observed.phase == Phase.RUNNING and old_phase != Phase.RUNNING:
        # A wake from sleep (jobs.reconciler.sleeping) is done: its time is for the page and
        # Retry-After.
        Wake.objects.filter(application=application, ready_at__isnull=True).update(
            ready_at=application.updated_at
        )
    if "ready_replicas" in changed:  # replica time, for its cost (jobs.usage.replica_time)
        replicas_changed(application, observed.ready_replicas, application.updated_at)
    if old_phase != observed.phase:
        kind = Event.Kind.WARNING if observed.phase in TROUBLE else Event.Kind.NORMAL
        message = observed.reason or f"{application.name} is {observed.phase}."
        Event.objects.create(
            application=application, reason=str(observed.phase), message=message, kind=kind
        )
    _announce(application)
    return True


def record_deleted(application: Application) -> None:
    """A Deleting application whose objects are gone: its row goes (its events and history
    with it), and live pages are told so."""
    application.phase = Phase.DELETING
    application.reason = f"{application.name} is deleted: its objects are gone from the cluster."
    application.next_step = ""
    group = group_name(application)
    application.delete()
    _announce(application, group, deleted=True)


def announce(application: Application) -> None:
    """Tell the application's live pages to read it again (a change not of its status: a
    Canary rollout's step, say), after the commit."""
    _announce(application)


def _announce(application: Application, group: str | None = None, deleted: bool = False) -> None:
    """To the application's live pages and to its organisation's dashboards, once what was
    saved is committed: a page reads the application again when told, and read before the
    commit it would show the old state until the next change (and nothing is said of a change
    rolled back). Never raises: a live page missing one update must never fail a deploy."""
    message = {"type": "application.status", "name": application.name, "deleted": deleted}
    message.update({name: getattr(application, name) for name in STATUS_FIELDS})
    batch = [
        (group or group_name(application), message),
        (
            groups.dashboard_group(application.organization_id),
            {**message, "type": "dashboard.status"},
        ),
    ]
    transaction.on_commit(partial(groups.send, batch))
