"""The organisation's members: roles and removal, invitations (made, withdrawn, and joined
through)."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import members as member_verbs
from accesspolicies.access import ORG_SESSION_KEY, require
from accesspolicies.forms import InviteForm, JoinForm, RoleForm, show_invalid
from accesspolicies.models import MembershipError, Role
from accesspolicies.problems import Invalid
from accesspolicies.shown_once import flash_secret, take_secret


@never_cache  # it may show an invitation link, once
def members(request, form=None, status=200):
    membership = require(request.membership, "view", "members")
    may_admin = membership.may("admin")
    context = {
        "members": membership.organization.memberships.select_related("user").order_by(
            "user__username"
        ),
        "roles": Role.choices,
        "may_admin": may_admin,
        "form": form or InviteForm(),
        "invitations": member_verbs.pending_invitations(membership) if may_admin else [],
        "shown": take_secret(request) if may_admin else None,
    }
    return render(request, "accesspolicies/members.html", context, status=status)


@require_POST
def invite(request):
    membership = require(request.membership, "admin", "members")
    form = InviteForm(request.POST)
    if not form.is_valid():
        return members(request, form=form, status=400)
    data = form.cleaned_data
    try:
        invitation, plain = member_verbs.invite(
            membership.organization,
            data["role"],
            data["note"],
            data["expires_in_days"],
            actor=membership,
        )
    except Invalid as error:
        show_invalid(form, error)
        return members(request, form=form, status=error.status)
    link = request.build_absolute_uri(reverse("accesspolicies:join", args=[plain]))
    flash_secret(
        request,
        f"Invitation to join as {invitation.role} is ready. Hand over this link; it works once, "
        f"until {invitation.expires_at:%Y-%m-%d %H:%M} UTC.",
        link,
    )
    return redirect("accesspolicies:members")


@require_POST
def invitation_withdraw(request, lookup):
    invitation = member_verbs.get_invitation(request.membership, lookup)
    member_verbs.withdraw(invitation, actor=request.membership)
    messages.success(request, "The invitation is withdrawn; its link no longer works.")
    return redirect("accesspolicies:members")


def _problem(request, message: str):
    return render(request, "accesspolicies/join.html", {"problem": message}, status=410)


@never_cache
@login_not_required
def join(request, token):
    """Whoever opens the link joins: logged in, with a button; new, by making an account."""
    invitation = member_verbs.find_invitation(token)
    problem = member_verbs.why_unusable(invitation)
    if problem:
        return _problem(request, problem)
    signing_up = not request.user.is_authenticated
    form = JoinForm(request.POST if request.method == "POST" else None)
    context = {"invitation": invitation, "form": form}
    if request.method != "POST":
        return render(request, "accesspolicies/join.html", context)
    if signing_up and not form.is_valid():
        return render(request, "accesspolicies/join.html", context, status=400)
    try:
        if signing_up:
            data = form.cleaned_data
            user = member_verbs.sign_up(token, data["username"], data["password"])
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        else:
            user = request.user
            member_verbs.accept(token, user)
    except Invalid as error:
        if error.field == "invitation":
            return _problem(request, error.message)
        show_invalid(form, error)
        return render(request, "accesspolicies/join.html", context, status=400)
    request.session[ORG_SESSION_KEY] = invitation.organization.slug
    messages.success(request, f"Welcome to {invitation.organization}, {user}.")
    return redirect("console:home")


@require_POST
def member_role(request, username):
    member = member_verbs.member_named(request.membership, username)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            member_verbs.change_role(member, form.cleaned_data["role"], actor=request.membership)
            messages.success(request, f"{username} is now {member.role}.")
        except MembershipError as error:
            messages.error(request, str(error))
    else:
        require(request.membership, "admin", "members")
        messages.error(request, "role: pick admin, deployer or viewer.")
    return redirect("accesspolicies:members")


@require_POST
def member_remove(request, username):
    member = member_verbs.member_named(request.membership, username)
    try:
        member_verbs.remove(member, actor=request.membership)
        messages.success(request, f"{username} is no longer a member; their tokens are revoked.")
    except MembershipError as error:
        messages.error(request, str(error))
    return redirect("accesspolicies:members")
