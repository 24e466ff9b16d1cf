"""The gateway's /metrics text, read back with prometheus_client's own parser: counters by
application, route and status class, tokens, a cumulative latency histogram in seconds, time to
first token, in-flight requests and the meter's flush figures."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs.gateway.metering import Meter, RequestRecord
from jobs.gateway.prom import CONTENT_TYPE, render_metrics


def samples(text: bytes) -> dict:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(got, name, **labels):
    return got[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def meter():
    meter = Meter(write=lambda batch: None, announce=False)
    meter._names[7] = 'chat "quoted"\\name'  # label values are escaped
    chat = "/v1/chat/completions"
    for latency in (0.5, 8.0, 8.0, 3000.0):
        meter.record(
            RequestRecord(
                at=0.0,
                status=200,
                latency_ms=latency,
                application_id=7,
                route=chat,
                prompt_tokens=3,
                completion_tokens=4,
                stream=True,
                ttft_ms=50.0,
            )
        )
    meter.record(
        RequestRecord(
            at=0.0, status=200, latency_ms=2.0, application_id=7, route=chat, failed_in_stream=True
        )
    )
    meter.record(
        RequestRecord(at=0.0, status=502, latency_ms=70000.0, application_id=7, route=chat)
    )
    meter.record(RequestRecord(at=0.0, status=401, latency_ms=0.1, route="/v1/models"))
    meter.record(RequestRecord(at=0.0, status=200, latency_ms=0.1, application_id=9, route=chat))
    return meter


def test_requests_by_application_route_and_status_class(meter):
    got = samples(render_metrics(meter, in_flight=lambda: 3))
    name = "servedeck_gateway_requests_total"
    app = 'chat "quoted"\\name'
    chat = "/v1/chat/completions"
    assert value(got, name, application=app, route=chat, code="2xx") == 5
    assert value(got, name, application=app, route=chat, code="5xx") == 1
    assert value(got, name, application="", route="/v1/models", code="4xx") == 1
    assert value(got, name, application="#9", route=chat, code="2xx") == 1  # name not known yet
    stream_failures = "servedeck_gateway_stream_failures_total"
    assert value(got, stream_failures, application=app, route=chat) == 1
    tokens = "servedeck_gateway_tokens_total"
    assert value(got, tokens, application=app, route=chat, kind="prompt") == 12
    assert value(got, tokens, application=app, route=chat, kind="completion") == 16
    assert value(got, "servedeck_gateway_in_flight_requests") == 3


def test_latency_histogram_is_cumulative_in_seconds(meter):
    got = samples(render_metrics(meter))
    name = "servedeck_gateway_request_duration_seconds"
    labels = {"application": 'chat "quoted"\\name', "route": "/v1/chat/completions"}
    assert value(got, f"{name}_bucket", **labels, le="0.001") == 1
    assert value(got, f"{name}_bucket", **labels, le="0.0025") == 2
    assert value(got, f"{name}_bucket", **labels, le="0.01") == 4
    assert value(got, f"{name}_bucket", **labels, le="5") == 5
    assert value(got, f"{name}_bucket", **labels, le="60") == 5  # the 502 took 70 s
    assert value(got, f"{name}_bucket", **labels, le="+Inf") == 6
    assert value(got, f"{name}_count", **labels) == 6
    assert value(got, f"{name}_sum", **labels) == pytest.approx(
        (0.5 + 8 + 8 + 3000 + 2 + 70000) / 1000
    )
    ttft = "servedeck_gateway_time_to_first_token_seconds"
    chat = labels
    assert value(got, f"{ttft}_count", **chat) == 4
    assert value(got, f"{ttft}_sum", **chat) == pytest.approx(0.2)


def test_counters_survive_flushes_and_the_meter_reports_itself(meter):
    assert meter.flush()
    meter.record(RequestRecord(at=0.0, status=200, latency_ms=1.0, route="/v1/models"))
    got = samples(render_metrics(meter))
    name = "servedeck_gateway_requests_total"
    assert value(got, name, application="", route="/v1/models", code="2xx") == 1
    assert value(got, name, application="", route="/v1/models", code="4xx") == 1
    assert value(got, "servedeck_gateway_usage_flushes_total") == 1
    assert value(got, "servedeck_gateway_usage_flush_failures_total") == 0
    assert value(got, "servedeck_gateway_usage_pending_entries") == 1
    assert value(got, "servedeck_gateway_usage_dropped_requests_total") == 0


def test_an_idle_gateway_renders_valid_text():
    text = render_metrics(Meter(write=lambda batch: None))
    assert text.endswith(b"\n")
    assert samples(text)[("servedeck_gateway_usage_flushes_total", ())] == 0
    assert "version=0.0.4" in CONTENT_TYPE


def test_a_gateway_holding_a_meter_renders_through_it(meter):
    meter.in_flight = lambda: 2
    text = meter.render_metrics()
    assert isinstance(text, str)
    assert samples(text.encode())[("servedeck_gateway_in_flight_requests", ())] == 2
    assert "servedeck_gateway_in_flight_requests" not in render_metrics(Meter()).decode()
