"""Benchmarks of a running revision (issue 24, item 4) against stand-in model servers: the load
goes through the gateway with a credential of its own, its figures are kept per revision and
shown on the model's page, and it is never a key's usage. Shapes and counts, never timings."""

import json
import re
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from accesspolicies.models import AuditEntry
from accesspolicies.secrets import BENCHMARK
from jobs.benchmark import plan as p
from jobs.benchmark import runs
from jobs.deploy import ActionError
from jobs.gateway.metering import Meter, RequestRecord
from jobs.gateway.snapshot import decide, load_snapshot
from jobs.models import Benchmark, BenchmarkLevel, Event, Revision, Rollout, UsageMinute
from tests.gateway.support import StandIn, caught_up, free_port, make_app, make_key
from tests.helpers import api_error, bearer, client_for, command_line, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
CHAT_LEVELS = [(1, 8), (4, 24), (16, 64)]  # (concurrency, requests) of plan.PLANS["chat"]


@pytest.fixture(scope="module")
def embedder():
    server = StandIn("bge-small")
    yield server
    server.stop()


def served(org, name, url, **spec):
    """A Running application with its first revision applied."""
    app = make_app(org, name, url, **spec)
    app.manifest["spec"]["source"]["model"]["format"] = "vLLM"  # as the defaults fill it in
    app.save()
    Revision.objects.create(
        application=app, number=1, manifest=app.manifest, outcome=Revision.Outcome.APPLIED
    )
    return app


def asked(server) -> int:
    """How many chat requests a stand-in has answered (its session's)."""
    return len(httpx.get(server.url + "/fake/requests", timeout=5).json()["requests"])


def rolling_out(app, canary_url: str, canary_phase: str = "Running") -> Rollout:
    """Revision 2 of `app` as a Canary beside revision 1, at its first step (10%)."""
    Revision.objects.create(
        application=app,
        number=2,
        manifest=app.manifest,
        outcome=Revision.Outcome.APPLIED,
        release="Canary",
    )
    return Rollout.objects.create(
        application=app,
        stable_revision=1,
        canary_revision=2,
        plan={
            "steps": [10, 50],
            "stepSeconds": 60,
            "maxErrorRateIncrease": 0.02,
            "maxLatencyIncrease": 0.25,
            "minRequests": 100,
        },  # fmt: skip
        state=Rollout.State.PROGRESSING,
        weight=10,
        step_started_at=timezone.now(),
        canary_phase=canary_phase,
        canary_endpoints=[canary_url] if canary_phase == "Running" else [],
    )


def levels_of(run) -> list[tuple[int, int]]:
    return [(lv.concurrency, lv.requests) for lv in run.levels.all()]


def benchmarked(app, member) -> Benchmark:
    """Start one and run it in this thread, as `app benchmark` does."""
    run, secret = runs.start(app, member)
    return runs.execute(run.pk, secret)


def chart_of(html: str) -> list:
    """The chart's figures the page carries as JSON (json_script, run by no browser)."""
    found = re.search(
        r'<script id="benchmark-chart-data" type="application/json">(.*?)</script>', html
    )
    assert found, "the page carries no benchmark chart data"
    return json.loads(found.group(1))


def finished(run_id, timeout=90.0) -> Benchmark:
    def done():
        run = Benchmark.objects.get(pk=run_id)
        return run if run.state != Benchmark.State.RUNNING else None

    return wait_for(done, "the benchmark did not end", timeout=timeout, every=0.2)


def test_a_chat_benchmark_measures_every_level_and_is_never_a_keys_usage(
    org, admin, deployer, alpha
):
    app = served(org, "alpha", alpha.url)
    key, _ = make_key(org)
    run, secret = runs.start(app, deployer)
    assert secret.startswith(BENCHMARK.prefix) and secret not in (run.lookup, run.secret_hash)
    meter = Meter(announce=False)
    run = runs.execute(run.pk, secret, meter=meter)

    assert run.state == Benchmark.State.SUCCEEDED, run.message
    assert (run.task, run.route, run.revision.number) == ("chat", p.CHAT_ROUTE, 1)
    assert levels_of(run) == CHAT_LEVELS
    # The stand-in is vLLM's shape with POST /tokenize: the prompt is fitted to its tokens.
    assert (run.prompt_source, run.prompt_tokens) == ("tokenizer", p.PROMPT_TOKENS)
    for level in run.levels.all():
        assert level.errors == 0 and level.output_tokens > 0
        assert level.output_tokens_per_second is not None
        assert None not in (level.ttft_p50_ms, level.ttft_p95_ms, level.itl_p50_ms)
    assert run.lookup == run.secret_hash == ""  # the credential ended with the run
    assert Event.objects.filter(application=app, reason="Benchmarked").count() == 1
    assert AuditEntry.objects.filter(action="application.benchmark", object_name="alpha").exists()

    # Metered apart: counted by the meter, in no usage row, so in no usage page or API.
    total = sum(requests for _, requests in CHAT_LEVELS)
    assert meter.benchmark_requests == total
    assert meter.flush() and not UsageMinute.objects.filter(application=app).exists()
    admin_api = httpx_client(admin)
    assert admin_api.get("/api/v1/applications/alpha/usage").json()["totals"]["requests"] == 0
    assert admin_api.get(f"/api/v1/keys/{key.name}/usage").json()["totals"]["requests"] == 0
    # A caller's request through the same meter is written: the rows above could have shown it.
    meter.record(
        RequestRecord(
            at=timezone.now().timestamp(),
            status=200,
            latency_ms=5.0,
            organization_id=org.pk,
            application_id=app.pk,
            api_key_id=key.pk,
            route=p.CHAT_ROUTE,
            completion_tokens=3,
        )
    )
    assert meter.flush()
    assert admin_api.get(f"/api/v1/keys/{key.name}/usage").json()["totals"]["requests"] == 1


def httpx_client(membership):
    """The test client with the member's personal token (the REST API's way in)."""
    client = client_for(membership)
    client.defaults.update(bearer(membership))
    return client


def test_embeddings_and_speech_have_their_own_levels(org, deployer, embedder, speech_server):
    bge = served(org, "bge-small", embedder.url)
    run = benchmarked(bge, deployer)
    assert run.state == Benchmark.State.SUCCEEDED, run.message
    assert (run.task, run.route) == ("embedding", p.EMBEDDINGS_ROUTE)
    assert levels_of(run) == [
        (lv.concurrency, lv.max_requests) for lv in p.PLANS["embedding"].levels
    ]
    assert all(lv.errors == 0 and lv.output_tokens_per_second is None for lv in run.levels.all())
    assert all(lv.latency_p50_ms is not None for lv in run.levels.all())

    speech = served(org, "speech", speech_server.url, runtime="parakeet")
    run = benchmarked(speech, deployer)
    assert run.state == Benchmark.State.SUCCEEDED, run.message
    assert (run.task, run.prompt_source) == ("speech", "audio")
    assert levels_of(run) == [(1, 4), (4, 12)]
    assert all(lv.errors == 0 for lv in run.levels.all())


def test_the_credential_calls_its_one_application_only_and_meters_apart(
    org, deployer, alpha, beta, gateway
):
    app = served(org, "alpha", alpha.url)
    served(org, "beta", beta.url)
    run, secret = runs.start(app, deployer)  # not launched: the test makes the calls
    caught_up(gateway)
    snapshot = load_snapshot()
    key = snapshot.authenticate(secret, timezone.now().timestamp())
    assert key is not None and key.benchmark and key.id < 0
    assert snapshot.authenticate(secret[:-1] + "x", timezone.now().timestamp()) is None
    body = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    headers = {"Authorization": f"Bearer {secret}"}
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200
    other = httpx.post(
        gateway.url + "/v1/chat/completions", json={**body, "model": "beta"}, headers=headers
    )
    assert other.status_code == 403
    records = gateway.meter.settled(2)
    assert [r.benchmark for r in records] == [True, True]
    assert [r.api_key_id for r in records] == [None, None]  # never a key's
    assert decide(key, snapshot.routes[(org.pk, "alpha")]).checks == ()

    # Ended (or past its deadline), the credential is refused.
    Benchmark.objects.filter(pk=run.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert load_snapshot().authenticate(secret, timezone.now().timestamp()) is None


def test_refused_when_not_running_or_already_running_and_an_overdue_run_ends(org, deployer, alpha):
    stopped = served(org, "resting", "", phase="Stopped")
    with pytest.raises(runs.ActionError) as refused:
        runs.start(stopped, deployer)
    assert refused.value.status == 409
    assert "resting is Stopped, not Running" in str(refused.value)
    assert str(refused.value).startswith("application: ")

    app = served(org, "alpha", alpha.url)
    first, _ = runs.start(app, deployer)
    with pytest.raises(runs.ActionError) as refused:
        runs.start(app, deployer)
    assert refused.value.status == 409 and "is running already" in str(refused.value)
    assert "by dan" in str(refused.value)
    assert Benchmark.objects.filter(application=app).count() == 1

    # A run whose worker died (past its deadline) no longer blocks the next one.
    Benchmark.objects.filter(pk=first.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    second, _ = runs.start(app, deployer)
    first.refresh_from_db()
    assert first.state == Benchmark.State.FAILED and "deadline" in first.message
    assert second.state == Benchmark.State.RUNNING


def test_the_api_starts_it_in_the_background_and_reads_it_back(client, org, deployer, alpha):
    served(org, "alpha", alpha.url)
    client.defaults.update(bearer(deployer))
    answer = client.post("/api/v1/applications/alpha/benchmarks")
    assert answer.status_code == 202, answer.content
    started = answer.json()
    assert (started["state"], started["revision"], started["task"]) == ("Running", 1, "chat")
    assert "secret" not in json.dumps(started) and "sdb_" not in json.dumps(started)
    run = finished(started["id"])
    assert run.state == Benchmark.State.SUCCEEDED, run.message
    one = client.get(f"/api/v1/applications/alpha/benchmarks/{run.pk}").json()
    assert [(lv["concurrency"], lv["requests"]) for lv in one["levels"]] == CHAT_LEVELS
    assert one["promptSource"] == "tokenizer"
    listed = client.get("/api/v1/applications/alpha/benchmarks").json()
    assert [r["id"] for r in listed] == [run.pk]
    missing = client.get("/api/v1/applications/alpha/benchmarks/999999")
    assert missing.status_code == 404 and "benchmarks lists them" in api_error(missing)["message"]


def test_the_api_refuses_with_409_a_viewer_with_403_an_outsider_with_404(
    client, org, deployer, viewer, outsider, alpha
):
    app = served(org, "alpha", alpha.url)
    served(org, "resting", "", phase="Stopped")
    client.defaults.update(bearer(deployer))
    refused = client.post("/api/v1/applications/resting/benchmarks")
    assert refused.status_code == 409
    assert "not Running" in api_error(refused)["message"]
    runs.start(app, deployer)
    busy = client.post("/api/v1/applications/alpha/benchmarks")
    assert busy.status_code == 409 and "running already" in api_error(busy)["message"]

    client.defaults.update(bearer(viewer))
    assert client.post("/api/v1/applications/alpha/benchmarks").status_code == 403
    assert client.get("/api/v1/applications/alpha/benchmarks").status_code == 200  # may read
    client.defaults.update(bearer(outsider))
    assert client.post("/api/v1/applications/alpha/benchmarks").status_code == 404
    assert client.get("/api/v1/applications/alpha/benchmarks").status_code == 404
    assert Benchmark.objects.count() == 1


def test_the_button_runs_it_and_the_page_shows_the_results(org, deployer, viewer, alpha):
    app = served(org, "alpha", alpha.url)
    page = client_for(deployer)
    answer = page.post("/models/alpha/benchmark/", follow=True)
    assert answer.status_code == 200
    assert "Benchmark of alpha revision 1 started" in answer.content.decode()
    run = finished(Benchmark.objects.get(application=app).pk)
    assert run.state == Benchmark.State.SUCCEEDED, run.message

    html = page.get("/models/alpha/").content.decode()
    assert 'id="benchmark-chart-data"' in html and "console/benchmarks.js" in html
    chart = chart_of(html)
    assert [(s["revision"], s["concurrency"]) for s in chart] == [(1, [1, 4, 16])]
    assert html.count('data-benchmark-revision="1"') == 3  # one row per level
    assert "sized with the model&#x27;s own tokenizer" in html

    # A second revision's result is compared beside the first's.
    Revision.objects.create(
        application=app, number=2, manifest=app.manifest, outcome=Revision.Outcome.APPLIED
    )
    benchmarked(app, deployer)
    html = page.get("/models/alpha/").content.decode()
    chart = chart_of(html)
    assert [s["revision"] for s in chart] == [1, 2]
    assert html.count('data-benchmark-revision="2"') == 3
    assert html.count("data-benchmark-headline") == 2  # deploy history: both revisions

    # A viewer reads the results but has no button, and may not start one.
    seen = client_for(viewer)
    html = seen.get("/models/alpha/").content.decode()
    assert 'id="benchmark-chart-data"' in html
    assert "/models/alpha/benchmark/" not in html
    assert seen.post("/models/alpha/benchmark/").status_code == 403
    assert BenchmarkLevel.objects.filter(benchmark__application=app).count() == 6


@pytest.fixture(scope="module")
def alpha_canary():
    """A second server of model alpha: a Canary rollout's revision 2."""
    server = StandIn("alpha")
    yield server
    server.stop()


def test_during_a_rollout_each_revision_is_benchmarked_apart_and_compared(
    org, deployer, alpha, alpha_canary
):
    app = served(org, "alpha", alpha.url)
    rolling_out(app, alpha_canary.url)
    page = client_for(deployer)
    html = page.get("/models/alpha/").content.decode()
    assert "Benchmark revision 1 (stable)" in html and "Benchmark revision 2 (canary)" in html
    total = sum(requests for _, requests in CHAT_LEVELS)

    # The canary: its load goes to the canary's server only, whatever the split (10%).
    before = (asked(alpha), asked(alpha_canary))
    answer = page.post("/models/alpha/benchmark/", {"revision": "2"}, follow=True)
    assert "Benchmark of alpha revision 2 started" in answer.content.decode()
    run = finished(Benchmark.objects.get(application=app).pk)
    assert run.state == Benchmark.State.SUCCEEDED and run.revision.number == 2, run.message
    assert (asked(alpha) - before[0], asked(alpha_canary) - before[1]) == (0, total)

    # The stable one (the default during a rollout, not the newest revision): the other server.
    before = (asked(alpha), asked(alpha_canary))
    run = benchmarked(app, deployer)
    assert run.state == Benchmark.State.SUCCEEDED and run.revision.number == 1, run.message
    assert (asked(alpha) - before[0], asked(alpha_canary) - before[1]) == (total, 0)

    # Side by side on the page: both revisions' results, in the chart and the table.
    html = page.get("/models/alpha/").content.decode()
    assert [s["revision"] for s in chart_of(html)] == [1, 2]
    assert (
        html.count('data-benchmark-revision="1"')
        == html.count('data-benchmark-revision="2"')
        == len(CHAT_LEVELS)
    )


def test_a_revision_that_does_not_serve_is_refused_naming_those_that_do(org, deployer, alpha):
    app = served(org, "alpha", alpha.url)
    with pytest.raises(ActionError) as refused:
        runs.start(app, deployer, 7)
    assert "does not serve revision 7" in str(refused.value) and "accepts 1" in str(refused.value)
    answer = httpx_client(deployer).post("/api/v1/applications/alpha/benchmarks?revision=7")
    assert answer.status_code == 400 and "does not serve revision 7" in api_error(answer)["message"]
    _, err, code = command_line("app", "benchmark", "alpha", "--revision", "7", "--user", "dan")
    assert code == 1 and "does not serve revision 7" in err
    rolling_out(app, "", canary_phase="Loading")
    with pytest.raises(ActionError) as refused:
        runs.start(app, deployer, 2)
    assert refused.value.status == 409 and "not serving yet (Loading)" in str(refused.value)
    with pytest.raises(ActionError) as refused:
        runs.start(app, deployer, 10**40)
    assert "does not serve revision 0" in str(refused.value) and "accepts 1 or 2" in str(
        refused.value
    )
    assert not Benchmark.objects.exists()
    answer = client_for(deployer).post(
        "/models/alpha/benchmark/", {"revision": "x" * 50}, follow=True
    )
    assert "does not serve revision 0" in answer.content.decode()


def test_after_a_rollout_rolled_back_the_stable_revision_is_the_one_measured(org, deployer, alpha):
    app = served(org, "alpha", alpha.url)
    Revision.objects.create(
        application=app,
        number=2,
        manifest=app.manifest,
        outcome=Revision.Outcome.APPLIED,
        release="Rolled back",
    )
    run, _ = runs.start(app, deployer)
    assert run.revision.number == 1
    with pytest.raises(ActionError) as refused:
        runs.start(app, deployer, 2)
    assert "does not serve revision 2" in str(refused.value)


def test_the_button_says_why_it_is_refused(org, deployer, outsider):
    served(org, "resting", "", phase="Stopped")
    page = client_for(deployer)
    answer = page.post("/models/resting/benchmark/", follow=True)
    assert "resting is Stopped, not Running" in answer.content.decode()
    assert not Benchmark.objects.exists()
    assert client_for(outsider).post("/models/resting/benchmark/").status_code == 404


def test_app_benchmark_runs_in_the_foreground_and_prints_its_levels(org, deployer, viewer, alpha):
    served(org, "alpha", alpha.url)
    out, err, code = command_line("app", "benchmark", "alpha", "--user", "dan")
    assert code == 0, err
    assert out.splitlines()[0] == "application/alpha revision 1 benchmark: Succeeded"
    assert "prompts: 128 tokens, sized with the model's own tokenizer" in out
    table = [line.split()[:3] for line in out.splitlines() if line[:1].isdigit()]
    assert table == [[str(c), str(n), "0"] for c, n in CHAT_LEVELS]
    _, err, code = command_line("app", "benchmark", "alpha", "--user", "vera")
    assert code == 1 and "viewer, which may not deploy" in err
    assert Benchmark.objects.count() == 1


def test_the_meter_counts_benchmark_requests_apart_and_metrics_says_how_many(org):
    written = []
    meter = Meter(announce=False, write=written.append)
    at = timezone.now().timestamp()
    mine = {"at": at, "status": 200, "latency_ms": 5.0, "organization_id": org.pk}
    meter.record(RequestRecord(**mine, application_id=7, benchmark=True, completion_tokens=9))
    meter.record(RequestRecord(**{**mine, "status": 502}, application_id=7, benchmark=True))
    assert meter.pending_entries() == 0 and meter.benchmark_requests == 2
    meter.record(RequestRecord(**mine, application_id=7, api_key_id=3, completion_tokens=4))
    assert meter.flush()
    ((entry, counts),) = written[0].items()
    assert entry[:3] == (org.pk, 7, 3) and counts[0] == 1  # the caller's request only
    text = meter.render_metrics()
    assert "servedeck_gateway_benchmark_requests_total 2" in text
    assert 'servedeck_gateway_requests_total{application="#7",route="",code="2xx"} 1' in text


def test_without_a_tokenizer_the_prompts_are_estimated_and_the_result_says_so(org, deployer, alpha):
    # transformers serve has no POST /tokenize: plain synthetic text of the estimated length
    app = served(org, "alpha", alpha.url, served_by="transformers")
    run = benchmarked(app, deployer)
    assert run.state == Benchmark.State.SUCCEEDED, run.message
    assert (run.prompt_source, run.prompt_tokens) == ("estimate", p.PROMPT_TOKENS)
    assert levels_of(run) == CHAT_LEVELS


def test_a_model_server_that_does_not_answer_fails_the_run_with_every_error_counted(org, deployer):
    app = served(org, "gone", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    run = benchmarked(app, deployer)
    assert run.state == Benchmark.State.FAILED
    assert run.message.startswith("Every request failed; the first: ")
    levels = list(run.levels.all())
    assert [lv.concurrency for lv in levels] == [1, 4, 16]
    assert all(lv.requests > 0 and lv.errors == lv.requests for lv in levels)
    assert all(lv.ttft_p50_ms is None and lv.output_tokens == 0 for lv in levels)
    assert Event.objects.filter(application=app, reason="BenchmarkFailed").count() == 1
    assert (run.lookup, run.secret_hash) == ("", "")
