"""API keys for the gateway's callers: list with a day's usage, create, revoke and rotate (a new
secret is shown once). Admins only; each view parses the form, calls one verb, and renders or
redirects."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import keys as key_verbs
from accesspolicies.access import require
from accesspolicies.forms import APIKeyForm, RotateForm, show_invalid
from accesspolicies.models import APIKey
from accesspolicies.problems import Invalid
from accesspolicies.shown_once import flash_secret, take_secret
from accesspolicies.tables import APIKeyTable


def _application_names(membership) -> list[str]:
    from jobs.models import Application

    # With each LoRA adapter's name: a key may be limited to an adapter alone.
    rows = Application.objects.for_member(membership).values_list("name", "manifest")
    return key_verbs.model_ids(rows)


@never_cache
def keys(request, form=None, status=200):
    membership = require(request.membership, "admin", key_verbs.WHAT)
    found, usage = key_verbs.listing(membership.organization, actor=membership)
    table = APIKeyTable(found, usage=usage, request=request)
    context = {
        "table": table,
        "form": form or APIKeyForm(application_names=_application_names(membership)),
        "rotate_form": RotateForm(),
        "shown": take_secret(request),
    }
    return render(request, "accesspolicies/keys.html", context, status=status)


@require_POST
def key_create(request):
    membership = require(request.membership, "admin", key_verbs.WHAT)
    form = APIKeyForm(request.POST, application_names=_application_names(membership))
    if not form.is_valid():
        return keys(request, form=form, status=400)
    data = form.cleaned_data
    try:
        key, plain = key_verbs.create(
            membership.organization,
            data["name"],
            data["applications"] or None,
            data["requests_per_minute"],
            data["tokens_per_minute"],
            data["concurrent_requests"],
            data["expires_in_days"],
            actor=membership,
        )
    except Invalid as error:
        show_invalid(form, error)
        return keys(request, form=form, status=error.status)
    flash_secret(request, f"API key {key.name} is created.", plain)
    return redirect("accesspolicies:keys")


@require_POST
def key_revoke(request, name):
    key = key_verbs.get_key(request.membership, name)
    if key_verbs.revoke(key, actor=request.membership):
        messages.success(request, f"{key.name} is revoked; the gateway refuses it from now.")
    return redirect("accesspolicies:keys")


@require_POST
def key_rotate(request, name):
    key: APIKey = key_verbs.get_key(request.membership, name)
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "grace minutes: " + " ".join(form.errors["grace_minutes"]))
        return redirect("accesspolicies:keys")
    try:
        key, plain = key_verbs.rotate(
            key, form.cleaned_data["grace_minutes"], actor=request.membership
        )
    except Invalid as error:
        messages.error(request, error.message)
        return redirect("accesspolicies:keys")
    minutes = form.cleaned_data["grace_minutes"]
    flash_secret(
        request,
        f"{key.name} has a new secret; the old one keeps working for {minutes} minutes.",
        plain,
    )
    return redirect("accesspolicies:keys")
