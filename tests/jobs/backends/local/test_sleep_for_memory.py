"""One machine's memory: when a model must wake and memory is short, idle models with
minReplicas 0 are put to sleep, idle longest first; one that must stay up never is; and the
refusal names the figures when not enough can be freed (memory_plan.py,
jobs.reconciler.sleeping)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.backends.local.memory_plan import GIB, Running, plan
from jobs.reconciler import sleeping
from tests.gateway.support import make_app


def test_nothing_sleeps_when_it_fits():
    assert plan("new", 4 * GIB, 8 * GIB, [Running("a", 4 * GIB, 0, True)]).to_sleep == ()


def test_the_idle_longest_sleep_first_and_only_as_many_as_needed():
    running = [
        Running("recent", 4 * GIB, 300, True),
        Running("oldest", 4 * GIB, 100, True),
        Running("older", 4 * GIB, 200, True),
    ]
    assert plan("new", 9 * GIB, 2 * GIB, running).to_sleep == ("oldest", "older")


def test_a_model_that_must_stay_up_is_never_stopped_and_the_refusal_names_the_figures():
    running = [Running("always", 16 * GIB, 0, False), Running("idle", 2 * GIB, 10, True)]
    found = plan("new", 8 * GIB, 1 * GIB, running)
    assert found.to_sleep == ()
    assert "needs 8.0 GiB" in found.refusal and "1.0 GiB free" in found.refusal
    assert "would free 2.0 GiB" in found.refusal and "hold 16.0 GiB" in found.refusal


def _model(**resources) -> dict:
    return {"runtime": {"engine": "vllm"}, "resources": resources}


@pytest.fixture
def apps(org, monkeypatch):
    slept: list[str] = []
    monkeypatch.setattr(sleeping, "put_to_sleep", lambda a: slept.append(a.name))
    now = timezone.now()

    def app(name, min_replicas, idle_minutes, memory="4Gi"):
        made = make_app(org, name, "http://127.0.0.1:1")
        made.manifest["spec"]["source"]["model"].update(
            resources={"memory": memory}, scaling={"minReplicas": min_replicas}
        )
        made.updated_at = now - timedelta(minutes=idle_minutes)
        made.save()
        return made

    return app, slept


def test_waking_sleeps_the_idle_longest_on_this_machine(apps):
    app, slept = apps
    app("stays", 1, 120)
    app("idle-long", 0, 60)
    app("idle-short", 0, 5)
    waking = app("waking", 0, 0, memory="6Gi")
    waking.phase = "Sleeping"
    waking.save()
    assert sleeping.make_room(waking, free=3 * GIB) == ""
    assert slept == ["idle-long"]


def test_waking_is_refused_with_the_figures_when_nothing_can_be_freed(apps):
    app, slept = apps
    app("stays", 1, 120, memory="16Gi")
    waking = app("waking", 0, 0, memory="6Gi")
    refusal = sleeping.make_room(waking, free=1 * GIB)
    assert refusal.startswith("waking needs 6.0 GiB") and slept == []
