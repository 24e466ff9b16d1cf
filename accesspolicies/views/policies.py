"""Access policies: which keys may call an application, with what limits, from where. Admins
only."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accesspolicies import policies as policy_verbs
from accesspolicies.access import require
from accesspolicies.forms import PolicyForm, show_invalid
from accesspolicies.models import APIKey
from accesspolicies.problems import Invalid


def _policy_form(membership, *args, **kwargs) -> PolicyForm:
    names = APIKey.objects.for_member(membership).values_list("name", flat=True)
    return PolicyForm(*args, key_names=list(names), **kwargs)


def _policy_values(form: PolicyForm) -> dict:
    data = form.cleaned_data
    return {
        "keys": data["keys"] or None,
        "rpm": data["requests_per_minute"],
        "tpm": data["tokens_per_minute"],
        "concurrency": data["concurrent_requests"],
        "allowed_networks": data["allowed_networks"],
    }


def policies(request, form=None, status=200):
    membership = require(request.membership, "admin", policy_verbs.WHAT)
    found = membership.organization.access_policies.prefetch_related("keys")
    context = {"policies": found, "form": form or _policy_form(membership)}
    return render(request, "accesspolicies/policies.html", context, status=status)


@require_POST
def policy_create(request):
    membership = require(request.membership, "admin", policy_verbs.WHAT)
    form = _policy_form(membership, request.POST)
    if not form.is_valid():
        return policies(request, form=form, status=400)
    try:
        policy = policy_verbs.create(
            membership.organization,
            form.cleaned_data["name"],
            **_policy_values(form),
            actor=membership,
        )
    except Invalid as error:
        show_invalid(form, error)
        return policies(request, form=form, status=error.status)
    messages.success(request, f"Access policy {policy.name} is created.")
    return redirect("accesspolicies:policies")


def policy_edit(request, name):
    membership = require(request.membership, "admin", policy_verbs.WHAT)
    policy = policy_verbs.get_policy(membership, name)
    status = 200
    if request.method == "POST":
        form = _policy_form(membership, request.POST)
        form.fields["name"].required = False
        if form.is_valid():
            try:
                policy_verbs.update(policy, **_policy_values(form), actor=membership)
            except Invalid as error:
                show_invalid(form, error)
                status = error.status
            else:
                messages.success(request, f"Access policy {policy.name} is saved.")
                return redirect("accesspolicies:policies")
        else:
            status = 400
    else:
        form = _policy_form(
            membership,
            initial={
                "name": policy.name,
                "keys": [] if policy.all_keys else [k.name for k in policy.keys.all()],
                "requests_per_minute": policy.requests_per_minute,
                "tokens_per_minute": policy.tokens_per_minute,
                "concurrent_requests": policy.concurrent_requests,
                "allowed_networks": "\n".join(policy.allowed_networks),
            },
        )
    form.fields["name"].disabled = True
    context = {"policy": policy, "form": form}
    return render(request, "accesspolicies/policy_edit.html", context, status=status)


@require_POST
def policy_delete(request, name):
    policy = policy_verbs.get_policy(request.membership, name)
    try:
        policy_verbs.delete(policy, actor=request.membership)
        messages.success(request, f"Access policy {name} is deleted.")
    except Invalid as error:
        messages.error(request, error.message)
    return redirect("accesspolicies:policies")
