"""The gateway's `/metrics` in Prometheus' text format (0.0.4), written by hand from the meter's
cumulative totals: nothing of it runs per request, only per scrape."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobs.usage import counters as c
from jobs.usage.histogram import LATENCY_BOUNDS_MS

if TYPE_CHECKING:  # the meter calls this module: a type only, no import at run time
    from jobs.gateway.metering import Meter

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    inner = ",".join(f'{name}="{_label_value(value)}"' for name, value in labels.items())
    return "{" + inner + "}"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def render_metrics(meter: Meter, in_flight: Callable[[], int] | None = None) -> bytes:
    """Requests by application, route and status class; by application and route the stream
    failures, tokens, the latency histogram (seconds) and time to first token; requests in
    flight (the gateway's callable); the meter's own flush figures. Serve with CONTENT_TYPE."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    totals = sorted(meter.totals(), key=lambda t: t[:3])
    family(
        "servedeck_gateway_requests_total",
        "counter",
        "Requests answered, by application, route and status class.",
    )
    for app, route, code, counts in totals:
        labels = _labels(application=app, route=route, code=code)
        lines.append(f"servedeck_gateway_requests_total{labels} {counts[c.REQUESTS]}")

    by_route: dict[tuple[str, str], list] = defaultdict(lambda: [0] * c.WIDTH)
    for app, route, _code, counts in totals:
        merged = by_route[(app, route)]
        for index, value in enumerate(counts):
            merged[index] += value

    family(
        "servedeck_gateway_stream_failures_total",
        "counter",
        "Streams answered 200 that carried an error event.",
    )
    for (app, route), counts in sorted(by_route.items()):
        labels = _labels(application=app, route=route)
        lines.append(
            f"servedeck_gateway_stream_failures_total{labels} {counts[c.ERRORS_IN_STREAM]}"
        )

    family("servedeck_gateway_tokens_total", "counter", "Tokens in (prompt) and out (completion).")
    for (app, route), counts in sorted(by_route.items()):
        for kind, index in (("prompt", c.PROMPT_TOKENS), ("completion", c.COMPLETION_TOKENS)):
            labels = _labels(application=app, route=route, kind=kind)
            lines.append(f"servedeck_gateway_tokens_total{labels} {counts[index]}")

    name = "servedeck_gateway_request_duration_seconds"
    family(name, "histogram", "From the request's arrival to the answer's end.")
    bounds = [f"{bound / 1000:g}" for bound in LATENCY_BOUNDS_MS] + ["+Inf"]
    for (app, route), counts in sorted(by_route.items()):
        prefix = (
            f'{name}_bucket{{application="{_label_value(app)}",route="{_label_value(route)}",le="'
        )
        cumulative = 0
        for index, le in enumerate(bounds):
            cumulative += counts[c.FIRST_BUCKET + index]
            lines.append(f'{prefix}{le}"}} {cumulative}')
        labels = _labels(application=app, route=route)
        lines.append(f"{name}_sum{labels} {_number(counts[c.LATENCY_MS_SUM] / 1000)}")
        lines.append(f"{name}_count{labels} {cumulative}")

    name = "servedeck_gateway_time_to_first_token_seconds"
    family(name, "summary", "Streams: from the request's arrival to the first chunk sent.")
    for (app, route), counts in sorted(by_route.items()):
        if counts[c.TTFT_COUNT]:
            labels = _labels(application=app, route=route)
            lines.append(f"{name}_sum{labels} {_number(counts[c.TTFT_MS_SUM] / 1000)}")
            lines.append(f"{name}_count{labels} {counts[c.TTFT_COUNT]}")

    if in_flight is not None:
        family("servedeck_gateway_in_flight_requests", "gauge", "Requests being answered now.")
        lines.append(f"servedeck_gateway_in_flight_requests {int(in_flight())}")

    family(
        "servedeck_gateway_benchmark_requests_total",
        "counter",
        "Requests of the console's benchmarks: in none of the figures above, nor in usage.",
    )
    lines.append(f"servedeck_gateway_benchmark_requests_total {meter.benchmark_requests}")
    family("servedeck_gateway_usage_flushes_total", "counter", "Usage flushes written.")
    lines.append(f"servedeck_gateway_usage_flushes_total {meter.flushes}")
    family("servedeck_gateway_usage_flush_failures_total", "counter", "Usage flushes that failed.")
    lines.append(f"servedeck_gateway_usage_flush_failures_total {meter.failed_flushes}")
    family(
        "servedeck_gateway_usage_pending_entries",
        "gauge",
        "Per-minute usage entries waiting for the next flush.",
    )
    lines.append(f"servedeck_gateway_usage_pending_entries {meter.pending_entries()}")
    family(
        "servedeck_gateway_usage_dropped_requests_total",
        "counter",
        "Requests whose usage was dropped after the database refused it for too long.",
    )
    lines.append(f"servedeck_gateway_usage_dropped_requests_total {meter.dropped_requests}")
    return ("\n".join(lines) + "\n").encode()
