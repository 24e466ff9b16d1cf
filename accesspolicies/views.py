"""Access pages: the organisation's members and roles, and each member's personal access tokens."""

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies.access import require
from accesspolicies.forms import MemberForm, RoleForm, TokenForm
from accesspolicies.models import MembershipError, PersonalAccessToken, Role


def _own_tokens(request):
    membership = require(request.membership, "view", "tokens")
    return membership, PersonalAccessToken.objects.filter(
        user=request.user, organization=membership.organization
    )


def tokens(request, form=None, plain=None):
    membership, own = _own_tokens(request)
    context = {"tokens": own, "form": form or TokenForm(), "plain": plain}
    return render(request, "accesspolicies/tokens.html", context)


@never_cache
@require_POST
def token_create(request):
    membership, _ = _own_tokens(request)
    form = TokenForm(request.POST)
    if not form.is_valid():
        return tokens(request, form=form)
    days = form.cleaned_data["expires_in_days"]
    expires = timezone.now() + timedelta(days=days) if days else None
    _, plain = PersonalAccessToken.issue(
        request.user, membership.organization, form.cleaned_data["name"], expires
    )
    # Rendered, not redirected: the plain text exists only in this response.
    return tokens(request, plain=plain)


@require_POST
def token_revoke(request, lookup):
    _, own = _own_tokens(request)
    token = own.filter(lookup=lookup).first()
    if token is None:
        raise Http404(f"You have no token {lookup!r} in this organisation.")
    token.revoke()
    messages.success(request, f"Token {token.name} is revoked; calls with it are refused from now.")
    return redirect("accesspolicies:tokens")


def _member(membership, username):
    found = membership.organization.memberships.filter(user__username=username).first()
    if found is None:
        raise Http404(f"{username!r} is not a member of {membership.organization}.")
    return found


def members(request, form=None, created=None):
    membership = require(request.membership, "view", "members")
    context = {
        "members": membership.organization.memberships.select_related("user").order_by(
            "user__username"
        ),
        "roles": Role.choices,
        "may_admin": membership.may("admin"),
        "form": form or MemberForm(),
        "created": created,
    }
    return render(request, "accesspolicies/members.html", context)


@never_cache
@require_POST
def member_add(request):
    membership = require(request.membership, "admin", "members")
    form = MemberForm(request.POST)
    if not form.is_valid():
        return members(request, form=form)
    try:
        added, password = membership.organization.add_member(
            form.cleaned_data["username"], form.cleaned_data["role"]
        )
    except MembershipError as error:
        form.add_error("username", str(error))
        return members(request, form=form)
    created = {"username": added.user.username, "password": password} if password else None
    if not created:
        messages.success(request, f"{added.user} joined as {added.role}.")
    return members(request, created=created)


@require_POST
def member_role(request, username):
    membership = require(request.membership, "admin", "members")
    member = _member(membership, username)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            membership.organization.change_role(member, form.cleaned_data["role"])
            messages.success(request, f"{username} is now {member.role}.")
        except MembershipError as error:
            messages.error(request, str(error))
    else:
        messages.error(request, "role: pick admin, deployer or viewer.")
    return redirect("accesspolicies:members")


@require_POST
def member_remove(request, username):
    membership = require(request.membership, "admin", "members")
    member = _member(membership, username)
    try:
        membership.organization.remove_member(member)
        messages.success(request, f"{username} is no longer a member; their tokens are revoked.")
    except MembershipError as error:
        messages.error(request, str(error))
    return redirect("accesspolicies:members")
