"""The model overview's data surfaces: chart data (JSON), a replica's log tail and the diff
between two revisions (htmx fragments), and what the overview page adds to its context."""

from dataclasses import replace

from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.api_errors import error_body
from console.static_finders import plotly_style_ids
from jobs.access import get_application
from jobs.models import UsageMinute
from jobs.overview import replica_logs
from jobs.overview.adapters import adapter_usage
from jobs.overview.facts import cost_summary, serving_facts
from jobs.overview.revision_diff import unified
from jobs.usage import charts


def _part(request, template: str, title: str, part_id: str, context: dict, status: int = 200):
    """The fragment for htmx; for a plain request, a page holding it (a link, no script)."""
    if request.htmx:
        return render(request, template, context, status=status)
    context = {**context, "part_template": template, "part_title": title, "part_id": part_id}
    return render(request, "jobs/overview_part.html", context, status=status)


def page_context(application, revisions, membership) -> dict:
    """What the overview sections (serving facts, adapters, charts, logs, history diff, cost)
    need. The usage and cost per API key only for a member who may `admin` keys (key names
    and their usage are an admin's, as on /api/v1/keys/<name>/usage)."""
    newest = revisions[0].number if revisions else None
    per_key = membership.may("admin")
    cost = cost_summary(application)
    return {
        "serving_facts": serving_facts(application, newest),
        "adapters": adapter_usage(application),  # one query, only with adapters
        "chart_windows": list(charts.WINDOWS.values()),
        "plotly_style_ids": plotly_style_ids(),
        "per_key": per_key,
        "cost": cost if per_key else replace(cost, keys=[]),
        "diff_from": revisions[1].number if len(revisions) > 1 else newest,
        "diff_to": newest,
    }


@require_GET
def chart_data(request, name):
    application = get_application(request.membership, name)
    try:
        window = charts.window_named(request.GET.get("window"))
    except charts.BadWindow as error:
        return JsonResponse(error_body(400, str(error), [error.as_dict()]), status=400)
    rows = UsageMinute.objects.filter(application=application)
    data = charts.chart_data(
        rows,
        window,
        cache_key=charts.cache_key(application),
        per_key=request.membership.may("admin"),  # key usage is an admin's (finding 14)
    )
    return JsonResponse(data)


@require_GET
def logs(request, name):
    # A deployer's, as on the REST API and the command line: a model server's log may quote
    # what callers sent.
    application = get_application(request.membership, name, "deploy")
    context = {"application": application}
    try:
        context["replicas"] = replica_logs.replicas(application)
        lines = replica_logs.bounded_lines(request.GET.get("lines"))
        context["tail"] = replica_logs.tail(application, request.GET.get("replica"), lines)
        context["lines"] = lines
    except replica_logs.LogsRefused as error:
        context["problem"] = str(error)
        return _part(request, "jobs/_logs.html", "Logs", "replica-logs", context, 400)
    except replica_logs.LogsUnavailable as error:
        context["problem"] = str(error)
        return _part(request, "jobs/_logs.html", "Logs", "replica-logs", context, 503)
    return _part(request, "jobs/_logs.html", "Logs", "replica-logs", context)


def _revision_number(value: str | None, field: str, known: list[int]) -> int:
    number = int(value) if value and value.isdigit() and len(value) < 10 else -1
    if number not in known:
        shown = repr((value or "")[:20])
        listed = ", ".join(str(n) for n in sorted(known)[-10:]) or "none"
        raise ValueError(
            f"{field}: {shown} is not a revision of this application; pick one of {listed}."
        )
    return number


DIFF = "jobs/_revision_diff.html"


@require_GET
def diff(request, name):
    application = get_application(request.membership, name)
    known = list(application.revisions.values_list("number", flat=True)[:1000])
    context = {"application": application}
    try:
        old = _revision_number(request.GET.get("from"), "from", known)
        new = _revision_number(request.GET.get("to"), "to", known)
    except ValueError as error:
        context["problem"] = str(error)
        return _part(request, DIFF, "Compare revisions", "revision-diff", context, 400)
    manifests = dict(
        application.revisions.filter(number__in=[old, new]).values_list("number", "manifest")
    )
    context.update(
        old=old,
        new=new,
        lines=unified(manifests[old], manifests[new], f"revision {old}", f"revision {new}"),
    )
    return _part(request, DIFF, "Compare revisions", "revision-diff", context)
