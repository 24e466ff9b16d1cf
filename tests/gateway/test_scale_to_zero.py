"""Scale to zero on the local backend with the stand-in model server: a minReplicas: 0
application sleeps after scaleToZeroAfter without a request, its processes ended; the first of
many concurrent requests wakes it exactly once and every one is answered (streams with SSE
progress comments); the per-key hold limit gives a 429, the wait bound a 503 with Retry-After.
Also the meter's latest request per application, which the reconciler sleeps by."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import OperationalError
from django.urls import reverse

from jobs import deploy as verbs
from jobs.gateway.metering import Meter, RequestRecord
from jobs.models import Application, Wake
from jobs.reconciler import Reconciler
from tests.gateway.support import caught_up, make_key
from tests.helpers import SHORTEST, client_for, wait_for

SLEEPY = SHORTEST + (
    "      scaling:\n"
    "        minReplicas: 0\n"
    "        scaleToZeroAfter: 2s\n"
    "      engine:\n"
    "        extraArgs: [--startup-delay, '1.5']\n"
)


def woken(gateway) -> bool:
    """Whether this gateway's wake call returned: read in memory, so the test's thread leaves
    the database to the wake meanwhile (SQLite's tables lock)."""
    return gateway.gateway.waker.wake_calls_done > 0


class Reconciling:
    """The reconciler's local steps, in the test's own thread (SQLite's in-memory tables lock
    against a second writer thread): each poll of `until` takes one step."""

    def __init__(self) -> None:
        self.reconciler = Reconciler()

    def until(self, ready, failure: str, timeout: float = 30) -> None:
        def step() -> bool:
            try:
                self.reconciler.step_local()
                return bool(ready())
            except OperationalError:  # the gateway's snapshot thread read the table meanwhile
                return False

        wait_for(step, failure, timeout=timeout, every=0.1)


@pytest.fixture
def sleepy(deployer, gateway, monkeypatch):
    from jobs.reconciler import sleeping

    monkeypatch.setattr(sleeping, "free_memory", lambda: 2**50)  # this machine's own aside
    app = verbs.apply(SLEEPY, deployer).application
    _, plain = make_key(app.organization)
    return app, plain, Reconciling()


def phase_of(app: Application) -> str:
    app.refresh_from_db()
    return app.phase


def asleep(app: Application, gateway, reconciling: Reconciling) -> None:
    reconciling.until(lambda: phase_of(app) == "Running", f"{app.name} did not run")
    reconciling.until(lambda: phase_of(app) == "Sleeping", f"{app.name} did not sleep")
    caught_up(gateway)
    route = gateway.gateway.keeper.current.routes[(app.organization_id, app.name)]
    assert route.phase == "Sleeping" and route.sleeps


def answered_while_reconciling(gateway, reconciling, calls) -> list[httpx.Response]:
    """Every call's answer, sent at once from a pool while the reconciler brings it up."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        wait_for(lambda: woken(gateway), "no wake was asked", timeout=30)
        reconciling.until(lambda: all(f.done() for f in futures), "not all were answered")
        return [f.result() for f in futures]


def ask(gateway, plain: str, name: str, stream: bool = False) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={
            "model": name,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
            "stream": stream,
        },
        timeout=60,
    )


def test_an_idle_application_sleeps_and_its_processes_end(sleepy, gateway):
    app, _, reconciling = sleepy
    asleep(app, gateway, reconciling)
    assert app.ready_replicas == 0 and app.replica_endpoints == []
    assert "sleeping" in app.reason
    assert app.events.filter(reason="Sleeping").exists()
    from jobs.backends import backend_for

    seen = backend_for(app.profile).observe(app)  # what the processes say: none runs
    assert seen.phase == "Stopped" and seen.ready_replicas == 0


def test_concurrent_requests_wake_it_once_and_are_all_answered(sleepy, gateway, deployer):
    app, plain, reconciling = sleepy
    asleep(app, gateway, reconciling)
    streams = [True] * 10 + [False] * 20
    calls = [lambda s=s: ask(gateway, plain, app.name, s) for s in streams]
    answers = answered_while_reconciling(gateway, reconciling, calls)
    assert [a.status_code for a in answers] == [200] * 30, [a.text[:200] for a in answers]
    assert Wake.objects.filter(application=app).count() == 1
    wake = Wake.objects.get(application=app)
    assert wake.ready_at is not None and wake.ready_at >= wake.requested_at  # it came up
    for answer, stream in zip(answers, streams, strict=True):
        if stream:
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert ": waking, phase " in answer.text
            assert answer.text.rstrip().endswith("data: [DONE]")
        else:
            assert answer.json()["choices"], answer.text
    records = gateway.meter.settled(30)
    chats = [r for r in records if r.route == "/v1/chat/completions"]
    assert len(chats) == 30 and {r.status for r in chats} == {200}
    assert {r.application_id for r in chats} == {app.pk}
    # The wake on its page: how many, and how long they took.
    page = client_for(deployer).get(reverse("jobs:application-detail", args=[app.name]))
    assert b"Wakes from sleep" in page.content and b"wake time p50" in page.content


def test_the_per_key_hold_limit_gives_429(sleepy, gateway):
    app, plain, reconciling = sleepy
    asleep(app, gateway, reconciling)
    gateway.gateway.waker.per_key = 2
    calls = [lambda: ask(gateway, plain, app.name) for _ in range(8)]
    answers = answered_while_reconciling(gateway, reconciling, calls)
    codes = sorted(a.status_code for a in answers)
    assert set(codes) == {200, 429} and codes.count(200) >= 2, codes
    refused = [a for a in answers if a.status_code == 429]
    assert all(int(a.headers["retry-after"]) >= 1 for a in refused)
    assert refused[0].json()["error"]["code"] == "wake_queue_full"
    assert Wake.objects.filter(application=app).count() == 1


def test_past_the_wait_bound_a_503_with_retry_after(sleepy, gateway):
    app, plain, reconciling = sleepy
    asleep(app, gateway, reconciling)
    gateway.gateway.waker.wait = 0.3  # the stand-in takes 1.5 s to start
    answer, streamed = answered_while_reconciling(
        gateway,
        reconciling,
        [lambda: ask(gateway, plain, app.name), lambda: ask(gateway, plain, app.name, True)],
    )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "model_waking"
    assert int(answer.headers["retry-after"]) >= 1
    assert streamed.status_code == 200
    assert ": waking, phase " in streamed.text and "model_waking" in streamed.text
    # The wake goes on: the model comes up, and the next request is answered.
    reconciling.until(lambda: phase_of(app) == "Running", "it did not wake")
    caught_up(gateway)
    assert ask(gateway, plain, app.name).status_code == 200
    assert Wake.objects.filter(application=app).count() == 1


def test_the_meter_writes_each_applications_latest_request(deployer):
    app = verbs.apply(SLEEPY, deployer).application
    meter = Meter(announce=False)

    def record(at: float) -> None:
        meter.record(
            RequestRecord(
                at=at,
                status=200,
                latency_ms=1.0,
                organization_id=app.organization_id,
                application_id=app.pk,
                api_key_id=None,
                route="/v1/chat/completions",
            )
        )

    record(1_900_000_000.0)
    record(1_900_000_030.0)
    assert meter.flush()
    app.refresh_from_db()
    assert app.last_request_at.timestamp() == 1_900_000_030.0
    record(1_900_000_010.0)  # an older one flushed later does not move it back
    assert meter.flush()
    app.refresh_from_db()
    assert app.last_request_at.timestamp() == 1_900_000_030.0
    # An answer still in progress (a long stream) counts as a request at each flush.
    meter.begin(app.pk)
    before = time.time()
    assert meter.flush()
    app.refresh_from_db()
    assert app.last_request_at.timestamp() >= before
    record(1_900_000_040.0)  # its end: no longer in progress
    assert meter._active == {}


def test_wake_time_percentiles():
    from jobs.reconciler.sleeping import percentile

    times = [float(n) for n in range(1, 21)]
    assert percentile(times, 0.5) == 10.0 and percentile(times, 0.95) == 19.0
    assert percentile([3.0], 0.95) == 3.0
