"""The Sleeping phase of a model with minReplicas 0 is pushed live to its page, with its wakes
from sleep (count, wake time p50/p95), through the console's socket as every status change."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from jobs.backends.base import Observed
from jobs.lifecycle import record_status
from jobs.models import Application, Wake
from tests.helpers import session_cookie
from tests.jobs.live.test_live_consumer import (  # noqa: F401 - the fixtures
    ORIGIN,
    clock,
    connect,
    finish,
    ids,
    layer,
    receive_all,
)

SLEEPY = {"spec": {"source": {"type": "Model", "model": {"scaling": {"minReplicas": 0}}}}}


def make_app(org, phase: str, manifest: dict | None = None) -> Application:
    return Application.objects.create(
        organization=org,
        name="chat",
        profile=org.profiles.get(),
        manifest=manifest or {"spec": {}},
        phase=phase,
    )


pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("layer"),
]


def woken_once(app) -> None:
    """A wake asked a while ago, Running now: record_status times it (ready_at)."""
    Wake.objects.create(application=app, requested_at=timezone.now() - timedelta(seconds=30))
    record_status(app, Observed(phase="Running", endpoint="http://chat", ready_replicas=1))


async def test_the_sleeping_phase_and_the_wakes_are_pushed_live(org, viewer):
    app = await sync_to_async(make_app)(org, "Running", SLEEPY)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    first = await communicator.receive_from(timeout=5)
    assert "Wakes from sleep: 0" in first

    said = "chat is sleeping: no request for 900 s (scaleToZeroAfter)."
    await sync_to_async(record_status)(app, Observed(phase="Sleeping", reason=said))
    got = await receive_all(communicator)
    assert len(got) == 1, got
    assert "live-phase" in ids(got[0]) and "live-status" in ids(got[0])
    assert ">Sleeping<" in got[0] and "is sleeping" in got[0]

    await sync_to_async(woken_once)(app)
    got = await receive_all(communicator)
    await finish(communicator)
    assert len(got) == 1, got
    assert ">Running<" in got[0]
    assert "Wakes from sleep: 1 (wake time p50" in got[0]


async def test_a_model_that_never_sleeps_shows_no_wakes(org, viewer):
    await sync_to_async(make_app)(org, "Running")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    first = await communicator.receive_from(timeout=5)
    await finish(communicator)
    assert "live-status" in ids(first) and "Wakes from sleep" not in first
