"""The audit log's page, filtered by action, object and actor."""

from django.shortcuts import render

from accesspolicies.models import AuditEntry
from accesspolicies.problems import searchable
from accesspolicies.tables import AuditTable

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
