"""Shortcuts over the one access decision (`Model.objects.get_for_member`, accesspolicies.scope)
for callers that only need the object: in the member's organisation or 404; 403 when the
member's role may not do `action` with it."""

from django.http import Http404

from accesspolicies.models import APIKey
from jobs.models import Application, Cluster, Profile


def get_application(membership, name: str, action: str = "view") -> Application:
    return Application.objects.object_for_member(membership, name, action)


def get_profile(membership, name: str, action: str = "view") -> Profile:
    return Profile.objects.object_for_member(membership, name, action)


def get_cluster(membership, name: str, action: str = "view") -> Cluster:
    return Cluster.objects.object_for_member(membership, name, action)


def get_api_key(membership, name: str, action: str = "view") -> APIKey:
    """An API key of the member's organisation by name (keys are organisation-wide, and an
    admin's business: another role is refused before the name is looked up)."""
    return APIKey.objects.object_for_member(membership, name, action)


class ProfileNeeded(Exception):  # noqa: N818 - a request to fix, not a fault
    """Several profiles and none named: the request must say which (a 400, not a 404)."""


def profile_or_only(membership, name: str | None) -> Profile:
    """The profile named, or the organisation's only one when no name is given."""
    if name:
        return get_profile(membership, name)
    profiles = list(Profile.objects.for_member(membership)[:6])
    if not profiles:
        raise Http404(f"{membership.organization} has no profile yet: an admin creates one.")
    if len(profiles) > 1:
        names = ", ".join(p.name for p in profiles[:5]) + (", ..." if len(profiles) > 5 else "")
        raise ProfileNeeded(
            f"{membership.organization} has several profiles ({names}): name one with profile."
        )
    return profiles[0]


__all__ = [
    "ProfileNeeded",
    "get_api_key",
    "get_application",
    "get_cluster",
    "get_profile",
    "profile_or_only",
]
