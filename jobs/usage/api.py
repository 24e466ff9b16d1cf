"""REST endpoints for usage: an application's or an API key's requests per minute over the last
N minutes (errors by status class, tokens, latency p50/p95) with totals, and an application's
health (the health page's figures). Any member may read an application's; a key's usage is an
admin's, as the key itself is (APIKeyQuerySet). The objects come through the access helpers,
so outsiders get 404."""

from datetime import datetime

from ninja import Query, Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from console.api_errors import errors
from jobs.access import get_api_key, get_application
from jobs.manifest.adapters import names as adapter_names
from jobs.models import UsageMinute
from jobs.usage.charts import DEFAULT_WINDOW, WINDOWS, cache_key, chart_data, window_named
from jobs.usage.readers import DEFAULT_MINUTES, MAX_MINUTES, health_of, report

router = Router(tags=["usage"])

# API field -> jobs.usage.counters.figures key
FIGURE_NAMES = {
    "requests": "requests",
    "errors4xx": "errors_4xx",
    "errors5xx": "errors_5xx",
    "errorsInStream": "errors_in_stream",
    "promptTokens": "prompt_tokens",
    "completionTokens": "completion_tokens",
    "streams": "streams",
    "latencyAvgMs": "latency_avg_ms",
    "latencyP50Ms": "latency_p50_ms",
    "latencyP95Ms": "latency_p95_ms",
    "ttftAvgMs": "ttft_avg_ms",
}


class UsageFigures(Schema):
    requests: int
    errors4xx: int
    errors5xx: int
    errorsInStream: int = Field(description="Streams answered 200 that carried an error event.")
    promptTokens: int
    completionTokens: int
    streams: int
    latencyAvgMs: float | None
    latencyP50Ms: float | None
    latencyP95Ms: float | None
    ttftAvgMs: float | None = Field(description="Streams: average time to the first chunk.")


class UsageMinuteOut(UsageFigures):
    minute: datetime


class UsageOut(Schema):
    name: str
    minutes: int
    since: datetime = Field(description="The first minute's start.")
    until: datetime = Field(description="The end of the current minute.")
    rows: list[UsageMinuteOut] = Field(description="Every minute, oldest first; zeros if idle.")
    totals: UsageFigures


class Span(Schema):
    minutes: int = Field(
        DEFAULT_MINUTES,
        ge=1,
        le=MAX_MINUTES,
        description=f"How many minutes back, the current one included (1 to {MAX_MINUTES}).",
    )


class ApplicationSpan(Span):
    model: str | None = Field(
        None,
        max_length=63,
        description="Only the requests that called this model id: the application's own name, "
        "or one of its LoRA adapters' (spec.source.model.adapters); every request when absent.",
    )


def _figures(figures: dict) -> dict:
    return {api: figures[ours] for api, ours in FIGURE_NAMES.items()}


def _usage(name: str, rows, minutes: int) -> dict:
    got = report(rows, minutes)
    return {
        "name": name,
        "minutes": minutes,
        "since": got["from"],
        "until": got["to"],
        "rows": [{"minute": row["minute"], **_figures(row)} for row in got["rows"]],
        "totals": _figures(got["totals"]),
    }


@router.get(
    "/applications/{name}/usage",
    response={200: UsageOut, **errors(400)},
    summary="An application's usage per minute (its own model's, or one LoRA adapter's)",
)
def application_usage(request, name: str, span: Query[ApplicationSpan]):
    application = get_application(request.auth, name)
    rows = UsageMinute.objects.filter(application=application)
    if span.model is not None:
        adapters = adapter_names(application.manifest)
        if span.model != application.name and span.model not in adapters:
            accepted = ", ".join([application.name, *adapters])
            raise HttpError(
                400,
                f"model {span.model!r} is not a model id of {application.name}; accepts "
                f"{accepted}. Leave it out for every request.",
            )
        rows = rows.filter(adapter="" if span.model == application.name else span.model)
        return _usage(span.model, rows, span.minutes)
    return _usage(application.name, rows, span.minutes)


@router.get(
    "/keys/{name}/usage", response=UsageOut, summary="An API key's usage per minute (admins)"
)
def key_usage(request, name: str, span: Query[Span]):
    key = get_api_key(request.auth, name)
    rows = UsageMinute.objects.filter(api_key=key)
    return _usage(key.name, rows, span.minutes)


class ChartWindow(Schema):
    window: str = Field(
        DEFAULT_WINDOW,
        max_length=20,
        description=f"The chart window: {', '.join(WINDOWS)} (buckets of 1 min, 5 min, 1 h).",
    )


@router.get(
    "/applications/{name}/charts",
    response={200: dict, **errors(400)},
    summary="An application's chart data: points per bucket and usage per API key (admins)",
    description="The points are in the shape jobs/usage/charts.py documents (the live page's too).",
)
def application_charts(request, name: str, query: Query[ChartWindow]):
    application = get_application(request.auth, name)
    window = window_named(query.window)
    rows = UsageMinute.objects.filter(application=application)
    per_key = request.auth.may("admin")  # key usage is an admin's (finding 14)
    return chart_data(rows, window, cache_key=cache_key(application), per_key=per_key)


class HealthWindow(Schema):
    minutes: int
    requests: int
    requestsPerMinute: float
    successRate: float | None = Field(
        description="Share of requests answered without a 5xx or an error inside the stream "
        "(0 to 1); null when nothing was asked."
    )
    errors4xx: int
    errors5xx: int
    errorsInStream: int
    latencyP50Ms: float | None
    latencyP95Ms: float | None


class HealthOut(Schema):
    name: str
    status: str = Field(
        description="healthy (Running, at most 1% failed in the last 5 minutes), degraded "
        "(Running, more failed) or down (not Running)."
    )
    phase: str
    readyReplicas: int
    desiredReplicas: int
    windows: dict[str, HealthWindow] = Field(description='"5m" and "24h".')


def _window(window: dict) -> dict:
    return {
        "minutes": window["minutes"],
        "requests": window["requests"],
        "requestsPerMinute": window["requests_per_minute"],
        "successRate": window["success_rate"],
        "errors4xx": window["errors_4xx"],
        "errors5xx": window["errors_5xx"],
        "errorsInStream": window["errors_in_stream"],
        "latencyP50Ms": window["latency_p50_ms"],
        "latencyP95Ms": window["latency_p95_ms"],
    }


@router.get(
    "/applications/{name}/health",
    response=HealthOut,
    summary="An application's health: status, success rate and latency (5 minutes, 24 hours)",
)
def application_health(request, name: str):
    health = health_of(get_application(request.auth, name))
    return {
        "name": health["name"],
        "status": health["status"],
        "phase": health["phase"],
        "readyReplicas": health["ready_replicas"],
        "desiredReplicas": health["desired_replicas"],
        "windows": {key: _window(window) for key, window in health["windows"].items()},
    }
