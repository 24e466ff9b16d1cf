"""Access pages: a member's personal access tokens for the REST API and the command line."""

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies.access import require
from accesspolicies.forms import TokenForm
from accesspolicies.models import PersonalAccessToken


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
