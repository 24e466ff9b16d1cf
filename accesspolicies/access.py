"""The member a request acts as, the check that their role allows an action, and whether a
session (a live socket's) is still signed in."""

from importlib import import_module

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    load_backend,
)
from django.utils.crypto import constant_time_compare

from accesspolicies.models import Membership
from accesspolicies.scope import ACTION_WORDS, Permissions, require

__all__ = [
    "ACTION_WORDS",
    "Permissions",
    "current_membership",
    "membership_for",
    "require",
    "signed_in",
]

ORG_SESSION_KEY = "organization"


def membership_for(user, org_slug: str | None = None) -> Membership | None:
    """The user's membership in the organisation named (None if they have none there); with no
    name, their first membership by organisation name."""
    if not user or not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("organization", "user").filter(user=user)
    if org_slug:
        return memberships.filter(organization__slug=org_slug).first()
    return memberships.order_by("organization__name").first()


def current_membership(request) -> Membership | None:
    """The membership of the organisation this session chose. When the session's organisation
    is gone (the member was removed), the first other one is chosen openly: the session is
    switched and the page says so; forms opened for the old one are refused by
    `OrganizationGuardMiddleware`, never applied to the new one."""
    chosen = request.session.get(ORG_SESSION_KEY)
    membership = membership_for(request.user, chosen)
    if membership is not None or not chosen:
        return membership
    membership = membership_for(request.user)
    if membership is None:
        request.session.pop(ORG_SESSION_KEY, None)
        return None
    request.session[ORG_SESSION_KEY] = membership.organization.slug
    messages.warning(
        request,
        f"You are no longer a member of the organisation {chosen!r}; "
        f"you now act in {membership.organization}.",
        fail_silently=True,
    )
    return membership


def signed_in(session_key: str | None, user_pk: int) -> bool:
    """Whether the session `session_key` is still signed in as user `user_pk`, as a request of
    it would find: not logged out or expired, the user active, and the session made under the
    user's current password (a password change ends the others). Read only: unlike
    django.contrib.auth.get_user it never flushes or cycles the session it asks about."""
    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    try:
        stored_pk, backend_path = session[SESSION_KEY], session[BACKEND_SESSION_KEY]
    except KeyError:
        return False
    if str(stored_pk) != str(user_pk) or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return False
    user = load_backend(backend_path).get_user(user_pk)  # None when inactive
    stored_hash = session.get(HASH_SESSION_KEY)
    if user is None or not stored_hash:
        return False
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(stored_hash, current) for current in hashes)
