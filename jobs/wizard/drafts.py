"""Drafts: the access helper (a draft is its author's alone) and starting, listing and
discarding them. The wizard's steps edit `Draft.manifest` through jobs.wizard.flow."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from accesspolicies.access import require
from jobs.models import Application, Draft

WHAT = "applications"  # a draft is an application not deployed yet: deployers' business


def get_draft(membership, key: str) -> Draft:
    """The member's own draft in their organisation, or 404; 403 for a role that may not
    deploy. Another member's draft is not found: drafts are private to their author."""
    return Draft.objects.object_for_member(membership, key, "deploy")


def drafts_of(membership) -> QuerySet[Draft]:
    """The member's drafts in their organisation, newest change first."""
    return Draft.objects.for_member(membership).select_related("application")


def new_draft(membership, manifest: dict) -> Draft:
    """A new draft of the member's, saved."""
    require(membership, "deploy", WHAT)
    return Draft.objects.create(
        organization=membership.organization, author=membership.user, manifest=manifest
    )


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
    draft.save(update_fields=["manifest", "updated_at"])
    return draft
