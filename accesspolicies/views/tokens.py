"""A member's personal access tokens: list, create (shown once) and revoke their own."""

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import audit
from accesspolicies.forms import TokenForm
from accesspolicies.models import PersonalAccessToken
from accesspolicies.problems import searchable
from accesspolicies.shown_once import flash_secret, take_secret


def _own_tokens(request):
    membership = request.membership
    return membership, PersonalAccessToken.objects.for_member(membership)


@never_cache  # it may show a new token, once
def tokens(request, form=None, status=200):
    membership, own = _own_tokens(request)
    context = {"tokens": own, "form": form or TokenForm(), "shown": take_secret(request)}
    return render(request, "accesspolicies/tokens.html", context, status=status)


@never_cache
@require_POST
def token_create(request):
    membership, _ = _own_tokens(request)
    form = TokenForm(request.POST)
    if not form.is_valid():
        return tokens(request, form=form, status=400)
    days = form.cleaned_data["expires_in_days"]
    expires = timezone.now() + timedelta(days=days) if days else None
    token, plain = PersonalAccessToken.issue(
        request.user, membership.organization, form.cleaned_data["name"], expires
    )
    audit.record(membership.organization, request.user, "token.create", "token", token.name)
    # Redirected, so a reload makes no second token: the plain text waits in the session for
    # the next page, which takes it out as it shows it.
    flash_secret(request, f"Your new token {token.name} is ready.", plain)
    return redirect("accesspolicies:tokens")


@require_POST
def token_revoke(request, lookup):
    _, own = _own_tokens(request)
    token = own.filter(lookup=lookup).first() if searchable(lookup) else None
    if token is None:
        raise Http404(f"You have no token {lookup!r} in this organisation.")
    token.revoke()
    audit.record(token.organization, request.user, "token.revoke", "token", token.name)
    messages.success(request, f"Token {token.name} is revoked; calls with it are refused from now.")
    return redirect("accesspolicies:tokens")
