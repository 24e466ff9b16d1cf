"""Drafts: the access helper (a draft is its author's alone) and starting, listing and
discarding them. The wizard's steps edit `Draft.manifest` through jobs.wizard.flow."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from accesspolicies.access import require
from accesspolicies.models import Membership
from jobs.access import Deployer, as_deployer
from jobs.models import Application, Draft

WHAT = "applications"  # a draft is an application not deployed yet: deployers' business


def get_draft(membership: Membership | Deployer, key: str) -> Draft:
    """The member's own draft in their organisation, or 404; 403 for a role that may not
    deploy (the deploy decision: not made again for a Deployer, decided earlier in the
    request). Another member's draft is not found: drafts are private to their author."""
    return Draft.objects.find(as_deployer(membership).membership, key)


def started_draft(membership, key: str) -> Draft | None:
    """The member's draft of that key, or None (discarded since, or never theirs)."""
    return Draft.objects.for_member(membership).filter(key=key).first() if key else None


def drafts_of(membership) -> QuerySet[Draft]:
    """The member's drafts in their organisation, newest change first."""
    return Draft.objects.for_member(membership).select_related("application")


def expiry_days() -> int:
    return max(1, settings.SERVEDECK_DRAFT_DAYS)


def prune_expired(organization) -> int:
    """Discard the organisation's drafts untouched for SERVEDECK_DRAFT_DAYS days: a draft is
    saved at every step, so those were left behind. Done when drafts are listed (one DELETE)."""
    cutoff = timezone.now() - timedelta(days=expiry_days())
    deleted, _ = Draft.objects.filter(organization=organization, updated_at__lt=cutoff).delete()
    return deleted


def listed(membership) -> list[Draft]:
    """The member's drafts as Deploy model lists them, the expired ones pruned first; an Edit
    draft that changes nothing yet is left out (Edit opens it again)."""
    prune_expired(membership.organization)
    return [
        d
        for d in drafts_of(membership)
        if d.application is None or d.manifest != d.application.manifest
    ]


def discard_all(membership) -> int:
    """Discard every draft of the member's in their organisation; how many went."""
    require(membership, "deploy", WHAT)
    deleted, _ = Draft.objects.for_member(membership).delete()
    return deleted


def taken_names(organization, but: Draft | None = None) -> set[str]:
    """The names an application or a draft of the organisation uses (`but` this draft)."""
    applications = Application.objects.filter(organization=organization)
    names = set(applications.values_list("name", flat=True))
    others = Draft.objects.filter(organization=organization)
    if but is not None and but.pk is not None:
        others = others.exclude(pk=but.pk)
    return names | {d.name for d in others.only("manifest") if d.name}


def unsaved_draft(membership, manifest: dict) -> Draft:
    """A new draft of the member's, not saved yet (save() saves it once its Model step is
    valid)."""
    require(membership, "deploy", WHAT)
    return Draft(organization=membership.organization, author=membership.user, manifest=manifest)


def edit_draft(membership, application: Application) -> Draft:
    """The member's draft that changes `application`: the one already begun, else a new one
    starting from the manifest that runs now."""
    mine = Draft.objects.for_member(membership).filter(application=application)
    draft = mine.first()
    if draft is not None:
        return draft
    try:
        with transaction.atomic():
            return Draft.objects.create(
                organization=membership.organization,
                author=membership.user,
                application=application,
                manifest=application.manifest,
            )
    except IntegrityError:  # begun at the same moment in another tab
        return mine.get()


def save(draft: Draft, manifest: dict) -> Draft:
    draft.manifest = manifest
    draft.updated_at = timezone.now()
    if draft.pk is None:
        draft.created_at = draft.updated_at
        draft.save()
    else:
        draft.save(update_fields=["manifest", "updated_at"])
    return draft
