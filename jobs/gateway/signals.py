"""Changes of applications that the gateway caches (phase, reason, endpoint, replicas, manifest,
name, a Canary rollout's split) bump the change counter; every cached change also nudges other
gateway processes through Redis pub/sub when REDIS_URL is set (after the commit, so they read
the new rows)."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from accesspolicies.models import AccessPolicy, APIKey, ChangeCounter, VerifiedDomain
from jobs.models import Application, Rollout

from .snapshot import NUDGE_CHANNEL

logger = logging.getLogger(__name__)

# What a Route holds of an Application: a save touching none of these changes no route.
ROUTED_FIELDS = (
    "name",
    "phase",
    "reason",
    "endpoint",
    "replica_endpoints",
    "runtime",
    "manifest",
    "profile_id",
)
_redis = None


def nudge() -> None:
    """Tell other gateway processes to reload now (best effort: the counter is the truth)."""
    global _redis
    url = getattr(settings, "REDIS_URL", None)
    if not url:
        return
    try:
        if _redis is None:
            _redis = redis.Redis.from_url(url, socket_timeout=2)
        _redis.publish(NUDGE_CHANNEL, b"1")
    except Exception:
        logger.warning("could not announce a gateway change through Redis; the counter will do")


def _nudge_after_commit(sender, **kwargs) -> None:
    transaction.on_commit(nudge)


def _remember_routed(sender, instance: Application, update_fields=None, **kwargs) -> None:
    """Before a full save, note whether a routed field changes (one query per save)."""
    if update_fields is not None or instance.pk is None:
        return
    old = Application.objects.filter(pk=instance.pk).values(*ROUTED_FIELDS).first()
    instance._gateway_changed = old is None or any(
        old[name] != getattr(instance, name) for name in ROUTED_FIELDS
    )


def _application_saved(sender, instance: Application, created, update_fields=None, **kwargs):
    if created:
        changed = True
    elif update_fields is not None:
        changed = any(f in ROUTED_FIELDS or f == "profile" for f in update_fields)
    else:
        changed = getattr(instance, "_gateway_changed", True)
    if changed:
        ChangeCounter.bump()
        transaction.on_commit(nudge)


def _application_deleted(sender, **kwargs) -> None:
    ChangeCounter.bump()
    transaction.on_commit(nudge)


# What a save of a Rollout may touch without changing its route (the judge's waiting notes).
ROLLOUT_NOT_ROUTED = frozenset(
    {"decisions", "canary_phase", "canary_reason", "canary_removed", "stable_replaced"}
)


def _rollout_changed(sender, update_fields=None, **kwargs) -> None:
    """A rollout's split (weight, state, the canary's replicas) is part of its route."""
    if update_fields is not None and set(update_fields) <= ROLLOUT_NOT_ROUTED:
        return
    ChangeCounter.bump()
    transaction.on_commit(nudge)


def connect() -> None:
    post_save.connect(_rollout_changed, sender=Rollout, dispatch_uid="gateway-rollout-save")
    post_delete.connect(_rollout_changed, sender=Rollout, dispatch_uid="gateway-rollout-del")
    pre_save.connect(_remember_routed, sender=Application, dispatch_uid="gateway-app-pre")
    post_save.connect(_application_saved, sender=Application, dispatch_uid="gateway-app-save")
    post_delete.connect(_application_deleted, sender=Application, dispatch_uid="gateway-app-del")
    for model in (APIKey, AccessPolicy, VerifiedDomain):
        for signal, what in ((post_save, "save"), (post_delete, "delete")):
            signal.connect(
                _nudge_after_commit,
                sender=model,
                dispatch_uid=f"gateway-nudge-{what}-{model.__name__}",
            )
    m2m_changed.connect(
        _nudge_after_commit, sender=AccessPolicy.keys.through, dispatch_uid="gateway-nudge-m2m"
    )
