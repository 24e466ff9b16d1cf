"""Access pages for the gateway's callers: API keys, access policies, verified domains, and the
audit log. Admins only; each view parses the form, calls one verb, and renders or redirects."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accesspolicies import domains as domain_verbs
from accesspolicies import keys as key_verbs
from accesspolicies import policies as policy_verbs
from accesspolicies.access import require
from accesspolicies.forms import APIKeyForm, DomainForm, PolicyForm, RotateForm, show_invalid
from accesspolicies.models import APIKey, AuditEntry
from accesspolicies.problems import Invalid, searchable
from accesspolicies.tables import APIKeyTable, AuditTable

SHOWN_ONCE = "shown_once"  # session key: a secret made by the last POST, shown on the next page


def flash_secret(request, title: str, secret: str) -> None:
    request.session[SHOWN_ONCE] = {"title": title, "secret": secret}


def take_secret(request) -> dict | None:
    """The secret the last POST made, removed from the session as it is shown."""
    return request.session.pop(SHOWN_ONCE, None)


def _application_names(membership) -> list[str]:
    from jobs.models import Application

    return list(Application.objects.for_member(membership).values_list("name", flat=True))


# --- API keys ----------------------------------------------------------------------------


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


# --- access policies ---------------------------------------------------------------------


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


# --- verified domains --------------------------------------------------------------------


def domains(request, form=None, status=200):
    membership = require(request.membership, "admin", domain_verbs.WHAT)
    rows = [
        {
            "entry": entry,
            "record_name": domain_verbs.record_name(entry.domain),
            "record_value": domain_verbs.record_value(entry),
        }
        for entry in membership.organization.domains.all()
    ]
    context = {"rows": rows, "form": form or DomainForm()}
    return render(request, "accesspolicies/domains.html", context, status=status)


@require_POST
def domain_add(request):
    membership = require(request.membership, "admin", domain_verbs.WHAT)
    form = DomainForm(request.POST)
    if not form.is_valid():
        return domains(request, form=form, status=400)
    try:
        entry = domain_verbs.add(
            membership.organization, form.cleaned_data["domain"], actor=membership
        )
    except Invalid as error:
        show_invalid(form, error)
        return domains(request, form=form, status=error.status)
    messages.success(
        request, f"{entry.domain} is added: publish its TXT record below, then press Verify."
    )
    return redirect("accesspolicies:domains")


@require_POST
def domain_verify(request, domain):
    entry = domain_verbs.get_domain(request.membership, domain)
    try:
        if domain_verbs.verify(entry, actor=request.membership):
            messages.success(request, f"{entry.domain} is verified; Domain exposure may use it.")
        else:
            messages.error(request, f"{entry.domain} is not verified: {entry.last_error}")
    except Invalid as error:
        messages.error(request, error.message)
    return redirect("accesspolicies:domains")


@require_POST
def domain_remove(request, domain):
    entry = domain_verbs.get_domain(request.membership, domain)
    try:
        domain_verbs.delete(entry, actor=request.membership)
        messages.success(request, f"{domain} is removed.")
    except Invalid as error:
        messages.error(request, error.message)
    return redirect("accesspolicies:domains")


# --- audit log ---------------------------------------------------------------------------

FILTER_MAX = 100


def audit_log(request):
    entries = AuditEntry.objects.for_member(request.membership)
    chosen = {
        key: request.GET.get(key, "").strip()[:FILTER_MAX] for key in ("action", "object", "actor")
    }
    chosen = {key: value if searchable(value) else "" for key, value in chosen.items()}
    if chosen["action"]:
        entries = entries.filter(action=chosen["action"])
    if chosen["object"]:
        entries = entries.filter(object_name__icontains=chosen["object"])
    if chosen["actor"]:
        entries = entries.filter(actor_name__icontains=chosen["actor"])
    table = AuditTable(entries, request=request)
    actions = (
        AuditEntry.objects.for_member(request.membership)
        .order_by("action")
        .values_list("action", flat=True)
        .distinct()
    )
    context = {"table": table, "chosen": chosen, "actions": actions}
    template = "accesspolicies/_audit_table.html" if request.htmx else "accesspolicies/audit.html"
    return render(request, template, context)
