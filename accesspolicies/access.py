"""The member a request acts as, and the check that their role allows an action."""

from django.contrib import messages

from accesspolicies.models import Membership
from accesspolicies.scope import ACTION_WORDS, Permissions, require

__all__ = ["ACTION_WORDS", "Permissions", "current_membership", "membership_for", "require"]

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
