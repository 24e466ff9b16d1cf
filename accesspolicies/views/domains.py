"""Verified domains: add one, publish its TXT record, verify it, remove it. Admins only."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accesspolicies import domains as domain_verbs
from accesspolicies.access import require
from accesspolicies.forms import DomainForm, show_invalid
from accesspolicies.problems import Invalid


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
