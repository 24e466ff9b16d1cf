"""The live sockets through Channels' WebsocketCommunicator on the console's ASGI application
(origin check and session auth included): who may listen and the close codes, the fragments
each kind of message brings, catch-up on connect, coalescing, and the dashboard. On the
in-memory layer, and on Redis when REDIS_URL is set."""

import asyncio
import copy
import html as html_module
import json
import os
import re
import uuid
from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client

from jobs.gateway import usage_store
from jobs.lifecycle import Observed, group_name, record_status
from jobs.live import consumers, groups
from jobs.models import Application, Event

ORIGIN = (b"origin", b"http://127.0.0.1")
LAYERS = ["memory"] + (["redis"] if os.environ.get("REDIS_URL") else [])


@pytest.fixture(params=LAYERS)
def layer(request, settings):
    if request.param == "redis":
        # The console's own Redis layer (REDIS_URL is set), under a prefix of this test's.
        config = copy.deepcopy(settings.CHANNEL_LAYERS["default"])
        assert config["BACKEND"] == "channels_redis.core.RedisChannelLayer", config
        config["CONFIG"]["prefix"] = f"test-live-{uuid.uuid4().hex[:8]}"
        settings.CHANNEL_LAYERS = {"default": config}
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()  # the layer of these settings, not a cached one
    yield request.param
    channel_layers.backends.clear()


def session_cookie(membership) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(membership.user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def make_app(org, name="chat", **fields) -> Application:
    fields = {"phase": "Pending", **fields}
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}, **fields
    )


async def connect(path, *headers):
    from console.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=[*headers])
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


async def receive_all(communicator, first=2.0, then=0.6) -> list[str]:
    """What arrives until nothing more does for `then` seconds (receive_nothing, unlike a timed
    out receive, leaves the application running)."""
    got, timeout = [], first
    while not await communicator.receive_nothing(timeout=timeout):
        got.append(await communicator.receive_from(timeout=1))
        timeout = then
    return got


def ids(html: str) -> list[str]:
    """The ids of the fragment's top-level elements, what htmx swaps out of band."""
    return re.findall(r'(?:^|>)\s*<[a-z]+\b[^>]*?\bid="([^"]+)"', html)


async def closed_with(communicator) -> int:
    output = await communicator.receive_output(timeout=5)
    assert output["type"] == "websocket.close", output
    return output["code"]


async def finish(communicator):
    await communicator.disconnect()
    await sync_to_async(connections.close_all)()


pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_anonymous_socket_is_closed_not_signed_in(org, layer):
    await sync_to_async(make_app)(org)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN)
    assert connected  # accepted so that the close code reaches the page
    assert await closed_with(communicator) == consumers.CLOSE_NOT_SIGNED_IN == 4401
    await finish(communicator)


async def test_an_outsider_is_closed_not_found_for_another_organisations_app(org, outsider, layer):
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(outsider)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    assert await closed_with(communicator) == consumers.CLOSE_NOT_FOUND == 4404
    await finish(communicator)


async def test_a_foreign_origin_is_refused_at_the_handshake(org, viewer, layer):
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer)
    evil = (b"origin", b"http://evil.example")
    communicator, connected, _ = await connect("/ws/applications/chat/", evil, cookie)
    assert not connected
    await finish(communicator)


async def test_connect_catches_up_then_a_status_change_arrives(org, viewer, layer):
    app = await sync_to_async(make_app)(org, phase="Downloading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    first = await communicator.receive_from(timeout=5)
    assert ids(first) == [
        "live-phase",
        "live-status",
        "live-endpoint",
        "live-events",
        "live-traffic",
        "live-chart-points",
        "live-serving",
    ]
    assert ">Downloading<" in first and 'aria-current="step">Downloading weights' in first

    observed = Observed(
        phase="Failed", reason="The server exited with code 1.", next_step="Fix the flag."
    )
    await sync_to_async(record_status)(app, observed)
    got = await receive_all(communicator)
    await finish(communicator)
    assert len(got) == 1, got
    assert ids(got[0]) == [
        "live-phase",
        "live-status",
        "live-endpoint",
        "live-events",
        "live-serving",
    ]
    assert ">Failed<" in got[0] and "Next step:" in got[0] and "Fix the flag." in got[0]
    assert "The server exited with code 1." in got[0].split('id="live-events"')[1]


async def test_usage_updates_are_coalesced_and_the_latest_arrives_last(org, viewer, layer):
    app = await sync_to_async(make_app)(org, phase="Running")
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    channel_layer = get_channel_layer()
    minute = int(datetime.now(UTC).timestamp() // 60 * 60)
    for sent in range(1, 41):  # 40 flushes' worth of messages as fast as they go
        counters = [0] * len(usage_store.COUNTER_FIELDS)
        counters[0] = 1  # one more request each time
        await sync_to_async(usage_store.write)({(org.pk, app.pk, None, minute): counters})
        await channel_layer.group_send(
            group_name(app), {"type": "usage.update", "name": "chat", "requests": sent}
        )
    got = await receive_all(communicator)
    await finish(communicator)
    assert 1 <= len(got) <= 3, f"{len(got)} sends for 40 messages"
    assert all(ids(html) == ["live-traffic", "live-chart-points"] for html in got)
    # The charts' newest points ride along: this minute's holds all 40 requests.
    points = re.search(r'id="live-chart-points" hidden data-points="([^"]*)"', got[-1]).group(1)
    assert json.loads(html_module.unescape(points))[-1]["requests"] == 40
    # 40 requests in the five-minute window: the last send shows all of them
    rate = re.search(r'data-figure="requests-per-minute">([^<]+)<', got[-1]).group(1)
    seconds = (datetime.now(UTC).second or 1) + 4 * 60
    assert float(rate) == pytest.approx(40 * 60 / seconds, rel=0.05)
    assert 'data-figure="success-rate">100%<' in got[-1]


async def test_serving_metrics_and_deletion_fragments(org, viewer, layer):
    app = await sync_to_async(make_app)(org, phase="Running", ready_replicas=1, desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)
    from django.core.cache import cache

    from jobs import serving_metrics

    figures = {"requests_waiting": 3.0, "requests_running": 8.0, "kv_cache_usage": 0.42}
    await sync_to_async(cache.set)(serving_metrics.cache_key(app.pk), figures, 60)
    await get_channel_layer().group_send(group_name(app), {"type": "serving.metrics", **figures})
    got = await receive_all(communicator)
    assert len(got) == 1 and ids(got[0]) == ["live-serving"]
    assert 'data-figure="requests-waiting">3<' in got[0] and ">42%<" in got[0]

    await sync_to_async(Event.objects.filter(application=app).delete)()
    from jobs.lifecycle import record_deleted

    await sync_to_async(record_deleted)(app)
    got = await receive_all(communicator)
    await finish(communicator)
    assert len(got) == 1 and ids(got[0]) == ["live-status"] and "chat is deleted" in got[0]


async def test_dashboard_gets_phase_changes_of_the_applications_it_shows(
    org, other_org, viewer, layer
):
    chat = await sync_to_async(make_app)(org, "chat")
    await sync_to_async(make_app)(org, "embed")
    theirs = await sync_to_async(make_app)(other_org, "secret")
    cookie = await sync_to_async(session_cookie)(viewer)
    path = "/ws/dashboard/?shown=chat,secret"  # another organisation's name is ignored
    communicator, connected, _ = await connect(path, ORIGIN, cookie)
    assert connected
    first = await communicator.receive_from(timeout=5)
    assert ids(first) == ["dash-phase-chat", "dash-replicas-chat"]

    await sync_to_async(record_status)(theirs, Observed(phase="Running"))
    await sync_to_async(record_status)(chat, Observed(phase="Loading", desired_replicas=1))
    await sync_to_async(record_status)(
        chat, Observed(phase="Running", ready_replicas=1, desired_replicas=1)
    )
    got = await receive_all(communicator)
    await finish(communicator)
    assert got and ids(got[-1]) == ["dash-phase-chat", "dash-replicas-chat"]
    assert ">Running<" in got[-1] and ">1/1<" in got[-1]
    assert not any("secret" in html for html in got)


@pytest.mark.parametrize(
    "query", ["shown=Bad_Name", "shown=" + ",".join(f"a{i}" for i in range(101))]
)
async def test_dashboard_refuses_a_malformed_list(org, viewer, layer, query):
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, connected, _ = await connect(f"/ws/dashboard/?{query}", ORIGIN, cookie)
    assert connected
    assert await closed_with(communicator) == consumers.CLOSE_BAD_REQUEST
    await finish(communicator)


async def test_the_groups_are_named_once(org):
    app = await sync_to_async(make_app)(org)
    assert group_name(app) == groups.application_group(app.pk) == f"application.{app.pk}"
    assert groups.dashboard_group(org.pk) == f"dashboard.{org.pk}"


async def test_a_user_of_no_organisation_is_closed_not_a_member(org, layer, django_user_model):
    await sync_to_async(make_app)(org)
    loner = await sync_to_async(django_user_model.objects.create_user)(
        username="lone", password="x"
    )

    def cookie():
        client = Client()
        client.force_login(loner)
        return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())

    communicator, connected, _ = await connect(
        "/ws/applications/chat/", ORIGIN, await sync_to_async(cookie)()
    )
    assert connected
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER == 4403
    await finish(communicator)


async def test_dashboard_sparklines_follow_usage(org, viewer, layer):
    chat = await sync_to_async(make_app)(org, "chat")
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, _, _ = await connect("/ws/dashboard/?shown=chat", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the phases
    minute = int(datetime.now(UTC).timestamp() // 60 * 60)
    counters = [0] * len(usage_store.COUNTER_FIELDS)
    counters[0] = 7
    await sync_to_async(usage_store.write)({(org.pk, chat.pk, None, minute): counters})
    await get_channel_layer().group_send(
        group_name(chat), {"type": "usage.update", "name": "chat", "requests": 7}
    )
    await get_channel_layer().group_send(  # the page's other messages are ignored here
        group_name(chat), {"type": "serving.metrics", "name": "chat", "requests_waiting": 1}
    )
    got = await receive_all(communicator)
    await finish(communicator)
    assert len(got) == 1 and ids(got[0]) == ["dash-spark-chat"]
    assert 'aria-label="7 requests in the last hour"' in got[0]


async def test_a_member_removed_while_listening_is_closed_not_shown_more(org, viewer, layer):
    """The socket checked membership at connect; a member removed (or who signed out) since
    gets no further fragment of the organisation's application, only the close code."""
    app = await sync_to_async(make_app)(org, phase="Pending")
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    await sync_to_async(viewer.delete)()
    await sync_to_async(record_status)(app, Observed(phase="Running", reason="secret-ish"))
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER
    await finish(communicator)


async def test_a_dashboard_of_a_removed_member_is_closed(org, viewer, layer):
    chat = await sync_to_async(make_app)(org, "chat")
    cookie = await sync_to_async(session_cookie)(viewer)
    communicator, _, _ = await connect("/ws/dashboard/?shown=chat", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the phases
    await sync_to_async(viewer.delete)()
    await sync_to_async(record_status)(chat, Observed(phase="Running"))
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER
    await finish(communicator)


async def test_many_pages_opened_at_once_all_connect(org, viewer, layer):
    """150 sockets joining their group at once: on Redis, more calls at once than redis-py's
    default pool of 100 connections, which it refuses rather than waits for."""
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer)
    opened = await asyncio.gather(
        *(connect("/ws/applications/chat/", ORIGIN, cookie) for _ in range(150))
    )
    try:
        assert all(connected for _, connected, _ in opened)
        firsts = await asyncio.gather(*(c.receive_from(timeout=10) for c, _, _ in opened))
        assert all('id="live-phase"' in first for first in firsts)
    finally:
        await asyncio.gather(*(c.disconnect() for c, _, _ in opened))
        await sync_to_async(connections.close_all)()
