"""The one access decision for every object type a member reaches.

Each organisation-owned model's manager is a `MemberQuerySet` (or a subclass naming how its
objects are looked up), so pages, the REST API, the command line and the wizard ask the same
question the same way (CONVENTIONS.md 3, after healthchecks' `_get_check_for_user`):

    apps = Application.objects.for_member(membership)            # 403 unless the role may view
    app, may = Application.objects.get_for_member(membership, "llama", "deploy")
    # 404 for a name not in the member's organisation, 403 when the role may not deploy

This module imports no model, so every app's models.py can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404

ACTION_WORDS = {"view": "view", "deploy": "deploy or change", "admin": "administer"}

# Longer than any stored name or key: such a value matches nothing and never reaches a query.
LONGEST_LOOKUP = 300


def require(membership, action: str, what: str):
    """Raise 403 unless the member's role allows `action` on `what` (a plural noun)."""
    if not membership:
        raise PermissionDenied(
            "You are not a member of any organisation; ask an organisation admin to add you."
        )
    if not membership.may(action):
        raise PermissionDenied(
            f"Your role in {membership.organization} is {membership.role}, which may not "
            f"{ACTION_WORDS[action]} {what}; ask an admin of the organisation for the role "
            "you need."
        )
    return membership


@dataclass(frozen=True)
class Permissions:
    """What a member may do with an object they can see."""

    view: bool
    deploy: bool
    admin: bool

    @classmethod
    def of(cls, membership) -> Permissions:
        return cls(*(membership.may(action) for action in ("view", "deploy", "admin")))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class MemberQuerySet(models.QuerySet):
    """Objects of one organisation, as a member sees them.

    Subclasses set `what` (the plural noun in refusals), `lookup_field`, `view_action` (the role
    needed to see the type at all) and may override `scoped` (drafts are their author's) or
    `lookup` (model masters are addressed by a slug).
    """

    what = "objects"
    lookup_field = "name"
    view_action = "view"
    related: tuple[str, ...] = ()

    def scoped(self, membership) -> MemberQuerySet:
        return self.filter(organization=membership.organization)

    def lookup(self, key: str) -> dict[str, Any]:
        return {self.lookup_field: key}

    def not_found(self, membership, shown: str) -> str:
        noun = self.model._meta.verbose_name
        return f"No {noun} named {shown} in {membership.organization}."

    def for_member(self, membership, action: str | None = None) -> MemberQuerySet:
        """The member's organisation's objects; 403 unless their role may see the type (or do
        `action`, when given)."""
        require(membership, action or self.view_action, self.what)
        return self.scoped(membership)

    def get_for_member(self, membership, key: str, action: str = "view") -> tuple[Any, Permissions]:
        """The object `key` in the member's organisation and what they may do with it: 404 when
        there is none (another organisation's objects are not found), 403 when their role may
        not do `action`."""
        require(membership, self.view_action, self.what)
        found = self.find(membership, key)
        if action != self.view_action:  # the same question is not asked twice
            require(membership, action, self.what)
        return found, Permissions.of(membership)

    def find(self, membership, key: str):
        """The object `key` among the member's (`scoped`), or 404. Decides nothing about the
        role: for a caller that has decided it (get_for_member; the deploy decision, made once
        per request, jobs.access.as_deployer)."""
        found = None
        if isinstance(key, str) and "\x00" not in key and len(key) <= LONGEST_LOOKUP:
            found = self.scoped(membership).filter(**self.lookup(key))
            found = found.select_related(*self.related).first()
        if found is None:
            raise Http404(self.not_found(membership, _shown(key)))
        return found

    def object_for_member(self, membership, key: str, action: str = "view"):
        """`get_for_member` without the permissions, for callers that only act."""
        return self.get_for_member(membership, key, action)[0]
