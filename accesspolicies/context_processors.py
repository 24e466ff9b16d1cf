from accesspolicies.models import Membership


def membership(request) -> dict:
    member = getattr(request, "membership", None)
    if not request.user.is_authenticated or not member:
        return {"membership": None, "other_memberships": []}
    others = Membership.objects.filter(user=request.user).exclude(pk=member.pk)
    return {"membership": member, "other_memberships": others.select_related("organization")}
