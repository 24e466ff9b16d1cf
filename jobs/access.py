"""One access helper per object type: the object in the member's organisation, or 404; 403 when
the member's role may not do `action` with it."""

from django.http import Http404

from accesspolicies.access import require
from jobs.models import Application, Cluster, Profile


def _get(model, membership, name: str, action: str, what: str, related=()):
    require(membership, "view", what)
    obj = (
        model.objects.filter(organization=membership.organization, name=name)
        .select_related(*related)
        .first()
    )
    if obj is None:
        raise Http404(f"No {model._meta.verbose_name} named {name!r} in {membership.organization}.")
    require(membership, action, what)
    return obj


def get_application(membership, name: str, action: str = "view") -> Application:
    return _get(Application, membership, name, action, "applications", ("profile__cluster",))


def get_profile(membership, name: str, action: str = "view") -> Profile:
    return _get(Profile, membership, name, action, "profiles", ("cluster",))


def get_cluster(membership, name: str, action: str = "view") -> Cluster:
    return _get(Cluster, membership, name, action, "clusters")


class ProfileNeeded(Exception):  # noqa: N818 - a request to fix, not a fault
    """Several profiles and none named: the request must say which (a 400, not a 404)."""


def profile_or_only(membership, name: str | None) -> Profile:
    """The profile named, or the organisation's only one when no name is given."""
    if name:
        return get_profile(membership, name)
    require(membership, "view", "profiles")
    profiles = list(Profile.objects.filter(organization=membership.organization)[:6])
    if not profiles:
        raise Http404(f"{membership.organization} has no profile yet: an admin creates one.")
    if len(profiles) > 1:
        names = ", ".join(p.name for p in profiles[:5]) + (", ..." if len(profiles) > 5 else "")
        raise ProfileNeeded(
            f"{membership.organization} has several profiles ({names}): name one with profile."
        )
    return profiles[0]


def get_api_key(membership, name: str, action: str = "view"):
    """An API key of the member's organisation by name (keys are organisation-wide)."""
    from accesspolicies.models import APIKey

    return _get(APIKey, membership, name, action, "API keys")
