"""Canary rollouts on the local backend, end to end: stand-in model servers for the stable and
the canary revisions (the canary's error rate set by its manifest), a live gateway metering into
the database, and the reconciler's steps with a clock of the test's own (the judge is due when
the test says; nothing sleeps for a step). A canary that fails 5% more requests rolls back at its
first step; a healthy one promotes through every step to 100% with the old revision stopped;
a caller sticks to one revision; a gateway and a reconciler started again keep the split and
the step; abort and promote by hand."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import OperationalError
from django.urls import reverse
from django.utils import timezone

from accesspolicies.models import AuditEntry
from jobs import deploy as verbs
from jobs.backends import backend_for
from jobs.gateway.app import Gateway
from jobs.gateway.metering import Meter
from jobs.gateway.proxy import Timeouts
from jobs.gateway.replica_choice import affinity_key
from jobs.gateway.snapshot import SnapshotKeeper
from jobs.gateway.split import bucket
from jobs.models import Application, Rollout, UsageMinute
from jobs.reconciler import Reconciler
from jobs.rollouts import steps as rollouts
from tests.gateway.support import LiveGateway, caught_up, make_key
from tests.helpers import SHORTEST, client_for, wait_for

CHAT = "/v1/chat/completions"
# Both revisions answer after 50 ms: with the widest latency limit (100 times slower, and 50 ms
# more), a loaded machine's jitter never decides a step (these tests judge by errors).
DELAY = "[--answer-delay, '0.05']"
STABLE = SHORTEST + f"      engine:\n        extraArgs: {DELAY}\n"


def canary_manifest(extra_args: str = DELAY, steps: str = "[10, 50]") -> str:
    """A Canary of SHORTEST. The latency limit is the widest: these tests judge by errors, and a
    loaded machine's latencies are not theirs to assert (the judge's latency rule is tested in
    tests/jobs/rollouts/test_judge.py)."""
    manifest = SHORTEST.replace(
        "spec:\n",
        "spec:\n  rollout:\n    strategy: Canary\n"
        f"    steps: {steps}\n    stepDuration: 1m\n    minRequests: 20\n"
        "    maxLatencyIncrease: 100\n",
    )
    if extra_args:
        manifest += f"      engine:\n        extraArgs: {extra_args}\n"
    return manifest


def metered_gateway() -> LiveGateway:
    """A live gateway whose meter writes the database's rows (flushed when the test says)."""
    gateway = Gateway(
        meter=Meter(announce=False),
        keeper=SnapshotKeeper(interval=0.2),
        timeouts=Timeouts(connect=2.0, read=30.0),
        start_meter=False,
    )
    return LiveGateway(gateway)


@pytest.fixture
def live(transactional_db):
    gateway = metered_gateway()
    yield gateway
    gateway.stop()


class Clock:
    """The judge's clock: starts in the past, so the metering rows the gateway writes now are
    inside every step's window, and moves only when the test moves it."""

    def __init__(self) -> None:
        self.at = timezone.now() - timedelta(minutes=30)

    def __call__(self):
        return self.at

    def step(self, seconds: float = 61) -> None:
        self.at += timedelta(seconds=seconds)


class Rolling:
    def __init__(self) -> None:
        self.clock = Clock()
        self.reconciler = Reconciler()
        self.reconciler.now = self.clock

    def step(self) -> None:
        for _ in range(20):  # the gateway's snapshot thread may hold SQLite's lock a moment
            try:
                self.reconciler.step_local()
                return
            except OperationalError:
                continue

    def until(self, ready, failure: str, timeout: float = 30) -> None:
        def once() -> bool:
            self.step()
            return bool(ready())

        wait_for(once, failure, timeout=timeout, every=0.1)


def running(app: Application) -> bool:
    app.refresh_from_db()
    return app.phase == "Running" and bool(app.replica_endpoints)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def rollout_of(app: Application) -> Rollout:
    return Rollout.objects.filter(application=app).order_by("-id").first()


def serving_canary(app: Application, rolling: Rolling) -> Rollout:
    rolling.until(
        lambda: rollout_of(app).state == "Progressing", "the canary did not begin its first step"
    )
    return rollout_of(app)


@pytest.fixture
def stable(deployer, live):
    app = verbs.apply(STABLE, deployer).application
    rolling = Rolling()
    rolling.until(lambda: running(app), f"{app.name} did not run")
    key, plain = make_key(app.organization)
    return app, key, plain, rolling


def conversations(key_id: int, weight: int, to_canary: int, to_stable: int, tag: str = ""):
    """First user messages whose bucket sends `to_canary` of them to the canary and
    `to_stable` to the stable revision at `weight`."""
    canary, other = [], []
    n = 0
    while len(canary) < to_canary or len(other) < to_stable:
        text = f"question {tag}{n}"
        n += 1
        body = {"messages": [{"role": "user", "content": text}]}
        side = canary if bucket(key_id, affinity_key(CHAT, body)) < weight else other
        if len(side) < (to_canary if side is canary else to_stable):
            side.append(text)
    return canary, other


def ask(live: LiveGateway, plain: str, name: str, text: str) -> httpx.Response:
    return httpx.post(
        live.url + CHAT,
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": name, "messages": [{"role": "user", "content": text}], "max_tokens": 4},
        timeout=30,
    )


def asked_of(endpoint: str) -> set[str]:
    answer = httpx.get(endpoint.rstrip("/") + "/fake/requests", timeout=5).json()
    return {r["first_user"] for r in answer["requests"]}


def traffic(live, plain, app, key, weight, to_canary=25, to_stable=25, tag=""):
    canary, stable = conversations(key.id, weight, to_canary, to_stable, tag)
    statuses = [ask(live, plain, app.name, text).status_code for text in canary + stable]
    live.gateway.meter.flush()
    return canary, stable, statuses


def test_a_canary_failing_5_percent_more_rolls_back_at_its_first_step(stable, live, deployer):
    app, key, plain, rolling = stable
    stable_endpoints = list(app.replica_endpoints)
    applied = verbs.apply(
        canary_manifest("[--answer-delay, '0.05', --error-rate, '0.05']"), deployer
    )
    assert applied.revision.number == 2
    rollout = serving_canary(app, rolling)
    assert (rollout.stable_revision, rollout.canary_revision, rollout.weight) == (1, 2, 10)
    canary_endpoints = list(rollout.canary_endpoints)
    assert canary_endpoints and not set(canary_endpoints) & set(stable_endpoints)
    caught_up(live)
    # 40 conversations to each revision: every 20th request the canary answers fails.
    to_canary, to_stable, statuses = traffic(live, plain, app, key, 10, 40, 40, "a")
    assert statuses.count(200) == 78 and len(statuses) == 80
    # Each conversation went to its revision, and was metered under it.
    # (the two it failed never reached its chat route, nor were they tried on the stable one)
    assert len(set(to_canary) - asked_of(canary_endpoints[0])) == 2
    assert not set(to_canary) & asked_of(stable_endpoints[0])
    assert set(to_stable) <= asked_of(stable_endpoints[0])
    per_revision = {
        r: sum(
            UsageMinute.objects.filter(application=app, revision=r).values_list(
                "requests", flat=True
            )
        )
        for r in (1, 2)
    }
    assert per_revision == {1: 40, 2: 40}
    rolling.step()  # not due yet: the step has a minute
    assert rollout_of(app).state == "Progressing"
    rolling.clock.step()
    rolling.step()
    rollout = rollout_of(app)
    assert rollout.state == "RolledBack" and rollout.weight == 0
    decision = rollout.decisions[-1]
    assert decision["decision"] == "rollback" and decision["by"] == "judge"
    assert decision["figures"]["canary"]["serverErrors"] == 2
    assert decision["figures"]["canary"]["errorRate"] == 0.05
    assert decision["figures"]["stable"]["errorRate"] == 0.0
    assert "above maxErrorRateIncrease 2.0%" in decision["reason"]
    event = app.events.get(reason="CanaryRolledBack")
    assert "5.0%" in event.message and event.kind == "Warning"
    entry = AuditEntry.objects.get(action="application.rollback", object_name=app.name)
    assert entry.detail["automatic"] is True and entry.detail["figures"]["canary"]["requests"] == 40
    # The figures on the model page: the decision, both revisions side by side, the history.
    html = client_for(deployer).get(reverse("jobs:application-detail", args=[app.name]))
    html = html.content.decode()
    panel = html.split('<section class="rollout"', 1)[1].split("</section>", 1)[0]
    assert "<strong>rollback</strong> by judge" in panel and "5.0%" in panel
    assert "<td>40</td><td>40</td>" in panel  # requests of each revision in the step
    assert '<span class="badge release">Rolled back</span>' in html
    app.refresh_from_db()
    assert "rollout" not in app.manifest["spec"]  # revision 1's manifest again
    assert app.revisions.get(number=2).release == "Rolled back"
    # Every request goes to the stable revision now, and the canary's replicas stop.
    caught_up(live)
    assert {ask(live, plain, app.name, t).status_code for t in to_canary[:5]} == {200}
    rolling.clock.step(rollouts.DRAIN_SECONDS + 1)
    rolling.step()
    assert rollout_of(app).canary_removed
    gone = backend_for(app.profile).observe_canary(app)
    assert gone.phase == "Pending" and not gone.replica_endpoints
    with pytest.raises(httpx.TransportError):
        httpx.get(canary_endpoints[0] + "/v1/models", timeout=2)


def test_a_healthy_canary_promotes_through_every_step_and_the_old_revision_stops(
    stable, live, deployer
):
    app, key, plain, rolling = stable
    old_pid = backend_for(app.profile).runner._load(app.name).replicas[0].pid
    verbs.apply(canary_manifest(), deployer)
    rollout = serving_canary(app, rolling)
    canary_endpoints = list(rollout.canary_endpoints)
    weights, asked_stable = [], []
    for step, weight in enumerate((10, 50)):
        caught_up(live)
        assert (
            live.gateway.keeper.current.routes[(app.organization_id, app.name)].canary.weight
            == weight
        )
        _, to_stable, statuses = traffic(live, plain, app, key, weight, tag=f"s{step}")
        asked_stable += to_stable
        assert set(statuses) == {200}
        weights.append(rollout_of(app).weight)
        rolling.clock.step()
        rolling.step()
    assert weights == [10, 50]
    rollout = rollout_of(app)
    assert rollout.state == "Promoting" and rollout.weight == 100
    assert [d["decision"] for d in rollout.decisions] == ["start", "step", "promote", "promote"]
    # Every request goes to the canary first; the stable replicas are replaced only after the
    # gateways had a moment to move them, and no request fails meanwhile.
    caught_up(live)
    rolling.step()
    assert not rollout_of(app).stable_replaced and pid_alive(old_pid)
    answered = [ask(live, plain, app.name, f"promoting {n}").status_code for n in range(10)]
    rolling.clock.step(rollouts.DRAIN_SECONDS + 1)
    rolling.step()
    assert rollout_of(app).stable_replaced
    caught_up(live)
    answered += [ask(live, plain, app.name, f"replacing {n}").status_code for n in range(10)]
    rolling.until(lambda: rollout_of(app).state == "Promoted", "the promotion did not finish")
    caught_up(live)
    answered += [ask(live, plain, app.name, f"promoted {n}").status_code for n in range(10)]
    assert answered == [200] * 30
    # The stable replicas now run revision 2; the old processes are gone.
    app.refresh_from_db()
    assert app.replica_endpoints and app.manifest["spec"]["rollout"]["strategy"] == "Canary"
    # The stable replicas' processes are new ones, of revision 2: none was asked before.
    state = backend_for(app.profile).runner._load(app.name)
    assert state.revision == 2 and "--answer-delay" in " ".join(state.replicas[0].command)
    assert state.replicas[0].pid != old_pid and not pid_alive(old_pid)
    assert asked_stable and not set(asked_stable) & asked_of(app.replica_endpoints[0])
    assert app.revisions.get(number=2).release == "Promoted"
    caught_up(live)
    route = live.gateway.keeper.current.routes[(app.organization_id, app.name)]
    assert route.canary is None
    assert {ask(live, plain, app.name, f"after {n}").status_code for n in range(5)} == {200}
    rolling.clock.step(rollouts.DRAIN_SECONDS + 1)
    rolling.step()
    assert rollout_of(app).canary_removed
    with pytest.raises(httpx.TransportError):
        httpx.get(canary_endpoints[0] + "/v1/models", timeout=2)


def test_a_restarted_gateway_and_reconciler_keep_the_split_and_the_step(stable, live, deployer):
    app, key, plain, rolling = stable
    verbs.apply(canary_manifest(steps="[30, 60]"), deployer)
    rollout = serving_canary(app, rolling)
    canary_endpoint = rollout.canary_endpoints[0]
    live.stop()
    again = metered_gateway()
    try:
        caught_up(again)
        to_canary, to_stable, statuses = traffic(again, plain, app, key, 30, tag="r")
        assert set(statuses) == {200}
        assert set(to_canary) <= asked_of(canary_endpoint)
        assert not set(to_stable) & asked_of(canary_endpoint)
        # A reconciler started afresh judges the step the database says, by its start.
        fresh = Rolling()
        fresh.clock.at = rolling.clock.at + timedelta(seconds=61)
        fresh.step()
        rollout = rollout_of(app)
        decided = rollout.decisions[-1]
        assert (rollout.state, rollout.step, rollout.weight) == ("Progressing", 1, 60), decided
    finally:
        again.stop()


def test_abort_by_hand_stops_the_canary(stable, live, deployer):
    app, key, plain, rolling = stable
    verbs.apply(canary_manifest(), deployer)
    serving_canary(app, rolling)
    with pytest.raises(verbs.ActionError) as refused:
        verbs.apply(canary_manifest("[--answer-delay, '0.06']"), deployer)
    assert "app abort bge-embed" in refused.value.message and refused.value.status == 409
    rollouts.abort(app, deployer.user, now=rolling.clock())
    rollout = rollout_of(app)
    assert rollout.state == "Aborted" and rollout.decisions[-1]["by"] == "user"
    assert AuditEntry.objects.filter(action="application.abort", actor=deployer.user).exists()
    assert app.revisions.get(number=2).release == "Aborted"
    with pytest.raises(rollouts.RolloutError):
        rollouts.abort(app, deployer.user)
    rolling.clock.step(rollouts.DRAIN_SECONDS + 1)
    rolling.step()
    assert rollout_of(app).canary_removed


def test_promote_by_hand_skips_the_steps_left(stable, live, deployer):
    app, key, plain, rolling = stable
    verbs.apply(canary_manifest(), deployer)
    serving_canary(app, rolling)
    rollouts.promote(app, deployer.user, now=rolling.clock())
    assert rollout_of(app).weight == 100
    rolling.clock.step(rollouts.DRAIN_SECONDS + 1)
    rolling.until(lambda: rollout_of(app).state == "Promoted", "the promotion did not finish")
    assert AuditEntry.objects.filter(action="application.promote", actor=deployer.user).exists()
    assert app.revisions.get(number=2).release == "Promoted"


def test_deleting_the_application_mid_rollout_stops_the_canary_too(stable, live, deployer):
    app, key, plain, rolling = stable
    verbs.apply(canary_manifest(), deployer)
    canary_endpoint = serving_canary(app, rolling).canary_endpoints[0]
    backend = backend_for(app.profile)
    verbs.delete(app, deployer)
    assert backend.observe_canary(app).phase == "Pending"
    with pytest.raises(httpx.TransportError):
        httpx.get(canary_endpoint + "/v1/models", timeout=2)
