"""Shortcuts over the one access decision (`Model.objects.get_for_member`, accesspolicies.scope)
for callers that only need the object: in the member's organisation or 404; 403 when the
member's role may not do `action` with it. And the deploy decision, made once per request
(`as_deployer`): the verbs of jobs.deploy take the Deployer it answers."""

from dataclasses import dataclass

from django.http import Http404

from accesspolicies.models import APIKey, Membership
from accesspolicies.scope import require
from jobs.models import Application, Cluster, Profile


@dataclass(frozen=True)
class Deployer:
    """A member whose role may deploy or change applications, as `as_deployer` decided in this
    request. Made only there."""

    membership: Membership


def as_deployer(member: Membership | Deployer | None) -> Deployer:
    """The deploy decision: 403 unless the member's role may deploy or change applications.

    A Deployer passes as it is: it was decided earlier in the request. Every verb that changes
    an application (jobs.deploy) calls this on what it is given, so whatever surface calls it
    is protected; a surface that must refuse before it reads anything (the wizard's Deploy,
    the first models' card, the YAML page, the REST API) decides first and hands the Deployer
    on, and the verb does not ask again.
    """
    if isinstance(member, Deployer):
        return member
    return Deployer(require(member, "deploy", "applications"))


def application_to_change(member, name: str) -> tuple[Application, Deployer]:
    """The application `name` and the member as its Deployer: 404 when the member's
    organisation has none (whatever the role), then 403 unless the role may deploy."""
    application = get_application(member, name)
    return application, as_deployer(member)


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
    "Deployer",
    "ProfileNeeded",
    "application_to_change",
    "as_deployer",
    "get_api_key",
    "get_application",
    "get_cluster",
    "get_profile",
    "profile_or_only",
]
