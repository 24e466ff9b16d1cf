"""The gateway's `/metrics` in Prometheus' text format (0.0.4), written by hand from the meter's
cumulative totals: nothing of it runs per request, only per scrape."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from jobs.gateway import metering as m
from jobs.gateway.histogram import LATENCY_BOUNDS_MS

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


def render_metrics(
    meter: m.Meter | None = None, in_flight: Callable[[], int] | None = None
) -> bytes:
    """Counters by application, route and status class; tokens; the latency histogram (seconds);
    time to first token; requests in flight (from the gateway's callable); the meter's own
    flush figures. Serve with CONTENT_TYPE."""
    meter = meter or m.process_meter()
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
        lines.append(f"servedeck_gateway_requests_total{labels} {counts[m.T_REQUESTS]}")

    by_route: dict[tuple[str, str], list] = defaultdict(lambda: [0] * m.T_WIDTH)
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
            f"servedeck_gateway_stream_failures_total{labels} {counts[m.T_STREAM_FAILURES]}"
        )

    family("servedeck_gateway_tokens_total", "counter", "Tokens in (prompt) and out (completion).")
    for (app, route), counts in sorted(by_route.items()):
        for kind, index in (("prompt", m.T_PROMPT_TOKENS), ("completion", m.T_COMPLETION_TOKENS)):
            labels = _labels(application=app, route=route, kind=kind)
            lines.append(f"servedeck_gateway_tokens_total{labels} {counts[index]}")

    name = "servedeck_gateway_request_duration_seconds"
    family(name, "histogram", "From the request's arrival to the answer's end.")
    for app, route, code, counts in totals:
        cumulative = 0
        for index, bound in enumerate(LATENCY_BOUNDS_MS):
            cumulative += counts[m.T_FIRST_BUCKET + index]
            labels = _labels(application=app, route=route, code=code, le=f"{bound / 1000:g}")
            lines.append(f"{name}_bucket{labels} {cumulative}")
        cumulative += counts[m.T_FIRST_BUCKET + len(LATENCY_BOUNDS_MS)]
        labels = _labels(application=app, route=route, code=code, le="+Inf")
        lines.append(f"{name}_bucket{labels} {cumulative}")
        labels = _labels(application=app, route=route, code=code)
        lines.append(f"{name}_sum{labels} {_number(counts[m.T_LATENCY_MS_SUM] / 1000)}")
        lines.append(f"{name}_count{labels} {cumulative}")

    name = "servedeck_gateway_time_to_first_token_seconds"
    family(name, "summary", "Streams: from the request's arrival to the first chunk sent.")
    for (app, route), counts in sorted(by_route.items()):
        if counts[m.T_TTFT_COUNT]:
            labels = _labels(application=app, route=route)
            lines.append(f"{name}_sum{labels} {_number(counts[m.T_TTFT_MS_SUM] / 1000)}")
            lines.append(f"{name}_count{labels} {counts[m.T_TTFT_COUNT]}")

    if in_flight is not None:
        family("servedeck_gateway_in_flight_requests", "gauge", "Requests being answered now.")
        lines.append(f"servedeck_gateway_in_flight_requests {int(in_flight())}")

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
