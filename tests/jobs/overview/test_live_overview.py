"""The overview's top and the health view: the figures module's meanings (table of cases), the
steps on the way to Running, the cards on the page, the health page and its JSON agreeing, a
fixed query count as usage grows, and vLLM's metrics scraped from the stand-in server."""

import re
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.backends.base import Observed
from jobs.lifecycle import group_name, record_status
from jobs.live import fragments
from jobs.models import Application, Event, UsageMinute
from jobs.overview import serving_metrics
from jobs.reconciler import Reconciler
from jobs.status.phases import elapsed_text, steps_of
from jobs.usage.counters import COUNTER_FIELDS
from jobs.usage.histogram import LATENCY_BUCKET_FIELDS
from jobs.usage.readers import rates, verdict
from tests.fakes.kube_objects import PROD_NAMESPACE
from tests.helpers import bearer

NOW = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)


def sums(**given):
    return {name: given.get(name, 0) for name in COUNTER_FIELDS}


@pytest.mark.parametrize(
    "given, seconds, expected",
    [
        (sums(), 300, {"requests_per_minute": 0, "success_rate": None, "tokens_per_second": 0}),
        (
            sums(requests=100, errors_5xx=1, errors_4xx=9, completion_tokens=600),
            60,
            {"requests_per_minute": 100, "success_rate": 0.99, "tokens_per_second": 10},
        ),
        (
            sums(requests=4, errors_in_stream=1, errors_5xx=1),
            120,
            {"requests_per_minute": 2, "success_rate": 0.5, "tokens_per_second": 0},
        ),
    ],
)
def test_rates_say_what_the_cards_mean(given, seconds, expected):
    got = rates(given, seconds)
    assert {key: got[key] for key in expected} == expected


@pytest.mark.parametrize(
    "phase, rate, word",
    [
        ("Running", None, "healthy"),
        ("Running", 0.99, "healthy"),
        ("Running", 0.98, "degraded"),
        ("Loading", 1.0, "down"),
        ("Failed", None, "down"),
    ],
)
def test_verdict(phase, rate, word):
    assert verdict(phase, {"5m": {"success_rate": rate}}) == word


@pytest.mark.parametrize(
    "phase, current",
    [
        ("Pending", "Scheduled"),
        ("Scheduling", "Scheduled"),
        ("Downloading", "Downloading weights"),
        ("Loading", "Loading"),
        ("Updating", "Loading"),
        ("Running", None),
        ("Failed", None),
        ("Stopped", None),
    ],
)
def test_steps_on_the_way_to_running(phase, current):
    steps = steps_of(phase)
    if current is None:
        assert steps == []
        return
    assert [s["label"] for s in steps] == ["Scheduled", "Downloading weights", "Loading", "Ready"]
    assert [s["label"] for s in steps if s["state"] == "current"] == [current]
    index = [s["label"] for s in steps].index(current)
    assert all(s["state"] == "done" for s in steps[:index])
    assert all(s["state"] == "todo" for s in steps[index + 1 :])


@pytest.mark.parametrize("seconds, text", [(8, "8 s"), (125, "2 min 5 s"), (11400, "3 h 10 min")])
def test_elapsed_text(seconds, text):
    assert elapsed_text(seconds) == text


def make_app(org, **fields):
    return Application.objects.create(
        organization=org,
        name="chat",
        profile=org.profiles.get(),
        manifest={"spec": {"source": {"model": {"uri": "hf://acme/chat"}}}},
        **fields,
    )


def usage(app, minutes_ago, **counters):
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    return UsageMinute(
        minute=minute,
        scope=f"o{app.organization_id}.a{app.pk}.k{minutes_ago}",
        organization_id=app.organization_id,
        application_id=app.pk,
        **counters,
    )


def test_the_page_shows_the_steps_and_the_cards(as_viewer, org):
    app = make_app(org, phase="Pending", desired_replicas=2)
    record_status(app, Observed(phase="Downloading", desired_replicas=2))
    middle = LATENCY_BUCKET_FIELDS[5]  # 25-50 ms
    UsageMinute.objects.bulk_create(
        [
            usage(app, 0, requests=30, errors_5xx=3, completion_tokens=900, **{middle: 30}),
            usage(app, 10, requests=1000),  # outside the cards' five minutes
        ]
    )
    html = as_viewer.get("/models/chat/").content.decode()
    assert 'id="live-phase" class="phase phase-downloading"' in html
    assert re.search(
        r'aria-current="step">Downloading weights <span class="elapsed">for \d+ s', html
    )
    assert 'data-figure="success-rate">90%<' in html
    assert re.search(r'data-figure="latency-p50">\d+ ms<', html)
    assert 'data-figure="replicas">0 of 2<' in html
    assert 'ws-connect="/ws/applications/chat/"' in html
    events = html.split('id="live-events"', 1)[1]
    assert "Downloading" in events


def test_a_failure_shows_its_reason_and_next_step_prominently(as_viewer, org):
    app = make_app(org)
    record_status(app, Observed(phase="Failed", reason="No GPU fits.", next_step="Pick a T4."))
    html = as_viewer.get("/models/chat/").content.decode()
    status = html.split('id="live-status"', 1)[1].split("</section>", 1)[0]
    assert 'class="callout bad prominent"' in status
    assert "No GPU fits." in status and "Next step:" in status and "Pick a T4." in status
    assert "progress-steps" not in status


def test_health_page_and_json_agree(as_viewer, viewer, org, client):
    app = make_app(org, phase="Running", ready_replicas=1, desired_replicas=1)
    fast, slow = LATENCY_BUCKET_FIELDS[4], LATENCY_BUCKET_FIELDS[9]
    UsageMinute.objects.bulk_create(
        [
            usage(app, 1, requests=50, errors_5xx=2, **{fast: 50}),
            usage(app, 60, requests=200, errors_4xx=20, **{slow: 200}),
        ]
    )
    body = client.get("/api/v1/applications/chat/health", **bearer(viewer)).json()
    assert body["status"] == "degraded" and body["phase"] == "Running"
    five, day = body["windows"]["5m"], body["windows"]["24h"]
    assert (five["requests"], five["errors5xx"], five["successRate"]) == (50, 2, 0.96)
    assert (day["requests"], day["errors4xx"], day["successRate"]) == (250, 20, 0.992)
    assert five["latencyP95Ms"] < day["latencyP95Ms"]

    html = as_viewer.get("/models/chat/health/").content.decode()
    assert 'data-health="degraded"' in html
    rows = dict(re.findall(r'<tr data-window="(\w+)">(.*?)</tr>', html, re.S))
    for name, window in (("5m", five), ("24h", day)):
        assert f'data-figure="requests">{window["requests"]}<' in rows[name]
        assert f'data-figure="success-rate">{window["successRate"] * 100:g}%<' in rows[name]
        shown = re.search(r'data-figure="latency-p95">([\d.]+) ms<', rows[name]).group(1)
        assert float(shown) == pytest.approx(window["latencyP95Ms"], abs=0.051)


def test_health_json_errors_are_the_apis(client, viewer, outsider, org):
    make_app(org, phase="Running")
    assert client.get("/api/v1/applications/chat/health").status_code == 401
    missing = client.get("/api/v1/applications/chat/health", **bearer(outsider))
    assert missing.status_code == 404 and set(missing.json()) == {"error"}


@pytest.mark.parametrize("minutes_of_usage", [0, 60, 7 * 24 * 60])
def test_the_overview_queries_stay_the_same_as_usage_grows(as_viewer, org, minutes_of_usage):
    app = make_app(org, phase="Running")
    UsageMinute.objects.bulk_create(
        [usage(app, m, requests=1) for m in range(minutes_of_usage)], batch_size=1000
    )
    Event.objects.bulk_create(
        [
            Event(application=app, reason="Running", message="x")
            for _ in range(minutes_of_usage // 60)
        ]
    )
    with CaptureQueriesContext(connection) as queries:
        response = as_viewer.get("/models/chat/")
    assert response.status_code == 200
    # session, user, membership, the application, revisions, replica days and clock (cost),
    # the week's usage per key (cost), events, the cards' window, the other organisations
    # (the switcher), the latest rollout, the benchmarks (runs past their deadline marked
    # Failed, then the latest per revision)
    assert len(queries) == OVERVIEW_QUERIES, "\n".join(q["sql"] for q in queries)


OVERVIEW_QUERIES = 14


@pytest.fixture
def stand_in():
    """The stand-in model server, serving vLLM's metric names."""
    from tests.fakes.model_server import __file__ as script

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, script, "--port", str(port), "--served-model-name", "chat"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(base + "/health", timeout=0.5)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield base
    finally:
        process.kill()
        process.wait()


def test_vllm_metrics_are_scraped_from_the_server(stand_in, org):
    app = make_app(org, phase="Running", endpoint=stand_in)
    app.manifest["spec"]["source"]["model"]["runtime"] = {"engine": "vllm"}
    figures = serving_metrics.observe(app)
    assert figures == {"requests_waiting": 0.0, "requests_running": 0.0, "kv_cache_usage": 0.0}
    assert serving_metrics.latest(app.pk) == figures
    assert serving_metrics.observe(app) is None  # unchanged: nothing to announce


def test_a_cpu_runtime_the_local_backend_recorded_is_not_scraped(stand_in, org):
    """A vLLM-format manifest the local backend runs on a CPU runtime (Application.runtime):
    no vLLM figures to read, even from a server that would answer them."""
    app = make_app(org, phase="Running", endpoint=stand_in, runtime="transformers")
    app.manifest["spec"]["source"]["model"]["runtime"] = {"engine": "vllm"}
    assert serving_metrics.observe(app) is None
    assert serving_metrics.latest(app.pk) is None
    app.runtime = "vllm"
    assert serving_metrics.observe(app) is not None


def test_a_server_that_does_not_answer_in_time_is_skipped(org):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts, never answers
    try:
        app = make_app(org, phase="Running", endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}")
        app.manifest["spec"]["source"]["model"]["runtime"] = {"engine": "vllm"}
        assert serving_metrics.observe(app) is None
    finally:
        silent.close()


def test_not_vllm_or_not_running_is_not_scraped(org):
    app = make_app(org, phase="Running", endpoint="http://127.0.0.1:9")
    assert serving_metrics.observe(app) is None  # no runtime engine: not vLLM
    app.manifest["spec"]["source"]["model"]["runtime"] = {"engine": "vllm"}
    app.phase = "Loading"
    assert serving_metrics.observe(app) is None


def test_the_runtime_the_local_backend_recorded_decides_not_the_manifest(stand_in, org):
    """The manifest asks for vLLM, but this machine serves it with a CPU runtime: its server
    has no vLLM metrics, so it is not scraped; recorded as vllm, or as vLLM's CPU build, it is."""
    app = make_app(org, phase="Running", endpoint=stand_in, runtime="transformers")
    app.manifest["spec"]["source"]["model"]["runtime"] = {"engine": "vllm"}
    assert serving_metrics.observe(app) is None
    assert serving_metrics.latest(app.pk) is None
    app.runtime = "vllm"
    assert serving_metrics.observe(app)["kv_cache_usage"] == 0.0
    app.runtime = "vllm-cpu"  # the same figures: observe() says None for unchanged ones
    assert serving_metrics.scraped(app)


def on_prod(org, **fields) -> Application:
    return Application.objects.create(
        organization=org,
        name="chat",
        profile=org.profiles.get(name="prod"),
        manifest={
            "spec": {
                "namespace": PROD_NAMESPACE,
                "source": {"model": {"uri": "hf://acme/chat", "runtime": {"engine": "vllm"}}},
            }
        },
        **fields,
    )


def test_kubernetes_applications_are_scraped_through_the_service_proxy(stand_in, org, prod, kube):
    """The predictor Service the gateway routes to, reached through the API server (the real
    kubernetes client, the emulator's service proxy, the stand-in server's /metrics); the
    reconciler's pass tells the live page."""
    app = on_prod(org, phase="Running", ready_replicas=1, desired_replicas=1)
    kube.serve_service(PROD_NAMESPACE, "chat-predictor", stand_in)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(app), channel)
    Reconciler().scrape_kubernetes()
    figures = {"requests_waiting": 0.0, "requests_running": 0.0, "kv_cache_usage": 0.0}
    assert serving_metrics.latest(app.pk) == figures
    message = async_to_sync(layer.receive)(channel)
    assert message["type"] == "serving.metrics" and message["requests_waiting"] == 0.0
    proxied = [r.path for r in kube.requests if "/proxy/" in r.path]
    assert proxied == [
        f"/api/v1/namespaces/{PROD_NAMESPACE}/services/chat-predictor%3A80/proxy/metrics"
    ]


def test_a_kubernetes_scrape_refused_or_without_endpoints_shows_no_figures(
    stand_in, org, prod, kube, caplog
):
    app = on_prod(org, phase="Running")
    assert serving_metrics.observe(app) is None  # 503: the Service has no endpoints
    kube.serve_service(PROD_NAMESPACE, "chat-predictor", stand_in)
    kube.fail_next(403, verb="get", resource="Service")
    assert serving_metrics.observe(app) is None
    assert serving_metrics.latest(app.pk) is None
    assert "services/proxy" in caplog.text  # the rule to grant, for the operator
    assert serving_metrics.observe(app) is not None  # once allowed


def test_a_status_message_reads_the_events_once_for_its_fragments(org):
    app = make_app(org, phase="Loading", desired_replicas=1)
    Event.objects.create(application=app, reason="Loading", message="Loading the weights.")
    moment = fragments.Moment(app)
    with CaptureQueriesContext(connection) as queries:
        html = moment.render("status").html + moment.render("events").html
    assert "Loading the weights." in html and 'aria-current="step">Loading' in html
    # the events once, and the latest rollout once (its panel is part of the status)
    assert len(queries) == 2, [q["sql"] for q in queries]
    assert sum("jobs_event" in q["sql"] for q in queries) == 1


def test_figures_of_a_server_no_longer_running_are_not_shown(org):
    app = make_app(org, phase="Running", ready_replicas=1, desired_replicas=1)
    figures = {"requests_waiting": 3.0, "requests_running": 1.0, "kv_cache_usage": 0.42}
    cache.set(serving_metrics.cache_key(app.pk), figures, 60)
    assert ">42%<" in fragments.render(["serving"], app)
    app.phase = "Failed"
    assert ">42%<" not in fragments.render(["serving"], app)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {"requests_waiting": None, "requests_running": None, "kv_cache_usage": None}),
        (
            'vllm:num_requests_waiting{model_name="a"} 2\nvllm:num_requests_waiting{e="1"} 3\n'
            "vllm:gpu_cache_usage_perc 0.5\n",
            {"requests_waiting": 5.0, "requests_running": None, "kv_cache_usage": 0.5},
        ),
        (
            'vllm:kv_cache_usage_perc{x="}"} 7 1700000000\nvllm:num_requests_running NaN\n',
            {"requests_waiting": None, "requests_running": None, "kv_cache_usage": 1.0},
        ),
    ],
)
def test_parse(text, expected):
    assert serving_metrics.parse(text) == expected
