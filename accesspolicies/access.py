"""The member a request acts as, and the check that their role allows an action."""

from django.core.exceptions import PermissionDenied

from accesspolicies.models import Membership

ORG_SESSION_KEY = "organization"

ACTION_WORDS = {"view": "view", "deploy": "deploy or change", "admin": "administer"}


def membership_for(user, org_slug: str | None = None) -> Membership | None:
    """The user's membership in the organisation named, else their first one."""
    if not user or not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("organization", "user").filter(user=user)
    if org_slug:
        chosen = memberships.filter(organization__slug=org_slug).first()
        if chosen:
            return chosen
    return memberships.order_by("organization__name").first()


def current_membership(request) -> Membership | None:
    return membership_for(request.user, request.session.get(ORG_SESSION_KEY))


def require(membership: Membership | None, action: str, what: str) -> Membership:
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
