"""The live sockets through Channels' WebsocketCommunicator on the console's ASGI application
(origin check and session auth included): who may listen and the close codes, the fragments
each kind of message brings, catch-up on connect, coalescing, the slow refresh of what time
alone changes, renderings shared by pages, and the dashboard. On the in-memory layer, and on
Redis when REDIS_URL is set.

The sockets' clock is driven here (`clock`): the wall clock stands still unless a test moves
it, the slow refresh comes only when a test asks for it, and with `held` the spacing of sends
follows a clock only the test moves; so nothing here depends on how fast the machine is."""

import asyncio
import contextlib
import copy
import html as html_module
import json
import os
import re
import time
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.db import connections, transaction

from jobs.backends.base import Observed
from jobs.lifecycle import group_name, record_status
from jobs.live import consumers, fragments, groups
from jobs.live.members import RECHECK_SECONDS, members
from jobs.models import Application, Event
from jobs.overview import serving_metrics
from jobs.usage import store as usage_store
from tests.helpers import session_cookie

ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")
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


class DrivenClock(consumers.Clock):
    """consumers.clock for these tests. The wall clock stands still unless `refresh` moves it;
    the slow refresh is due only when a test calls `refresh`; with `held`, sends are spaced on a
    clock only `advance` moves (else on the loop's, as in production)."""

    def __init__(self) -> None:
        # The wall clock: 20 s into the current minute, at the start of a refresh interval, so
        # that what a test moves it by says which minute and interval it lands in.
        self.at = time.time() // 60 * 60 + 20
        self.held = False
        self.now = 0.0  # the held clock
        self.sleepers: list[tuple[float, asyncio.Future]] = []
        self.refreshers: list[asyncio.Future] = []

    def monotonic(self) -> float:
        return self.now if self.held else super().monotonic()

    def wall(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        if not self.held:
            await super().sleep(seconds)
            return
        future = asyncio.get_running_loop().create_future()
        self.sleepers.append((self.now + seconds, future))
        await future

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [(until, f) for until, f in self.sleepers if until <= self.now]
        for sleeper in due:
            self.sleepers.remove(sleeper)
            if not sleeper[1].done():
                sleeper[1].set_result(None)

    async def refresh_due(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self.refreshers.append(future)
        await future

    def refresh(self, later_by: float = 0.0) -> None:
        """Move the wall clock on by `later_by` seconds; every socket's refresh is due."""
        self.at += later_by
        waiting, self.refreshers = self.refreshers, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    def minute(self) -> int:
        """The start of the wall clock's minute, as usage rows are keyed."""
        return int(self.at // 60 * 60)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    driven = DrivenClock()
    monkeypatch.setattr(consumers, "clock", driven)
    # Memberships confirmed stay confirmed until a test advances the held clock.
    monkeypatch.setattr(members, "clock", lambda: driven.now)
    monkeypatch.setattr(members, "_seen", {})
    return driven


def usage(org, app, minute: int, requests: int) -> None:
    counters = [0] * len(usage_store.COUNTER_FIELDS)
    counters[0] = requests
    usage_store.write({(org.pk, app.pk, None, minute): counters})


def figure(html: str, name: str) -> str:
    return re.search(rf'data-figure="{name}">([^<]+)<', html).group(1)


def chart_points(html: str) -> list[dict]:
    found = re.search(r'id="live-chart-points" hidden data-points="([^"]*)"', html).group(1)
    return json.loads(html_module.unescape(found))


def make_app(org, name="chat", **fields) -> Application:
    fields = {"phase": "Pending", **fields}
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}, **fields
    )


async def connect(path, *headers, timeout: float = 5):
    from console.asgi import application

    # Addressed to the console at 127.0.0.1 (port 80), as ORIGIN's page was served from.
    communicator = WebsocketCommunicator(application, path, headers=[HOST, *headers])
    connected, code = await communicator.connect(timeout=timeout)
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
    cookie = await sync_to_async(session_cookie)(outsider.user)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    assert await closed_with(communicator) == consumers.CLOSE_NOT_FOUND == 4404
    await finish(communicator)


async def test_a_foreign_origin_is_refused_at_the_handshake(org, viewer, layer):
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    evil = (b"origin", b"http://evil.example")
    communicator, connected, _ = await connect("/ws/applications/chat/", evil, cookie)
    assert not connected
    await finish(communicator)


async def test_connect_catches_up_then_a_status_change_arrives(org, viewer, layer):
    app = await sync_to_async(make_app)(org, phase="Downloading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
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
        "benchmark-results",
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


async def test_usage_updates_are_coalesced_and_the_latest_arrives_last(org, viewer, layer, clock):
    clock.held = True  # no send until the test moves the clock, however long the writes take
    app = await sync_to_async(make_app)(org, phase="Running")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up, which counts as a send
    channel_layer = get_channel_layer()
    for sent in range(1, 41):  # 40 flushes' worth of messages, each after its write
        await sync_to_async(usage)(org, app, clock.minute(), 1)  # one more request each time
        await channel_layer.group_send(
            group_name(app), {"type": "usage.update", "name": "chat", "requests": sent}
        )
    clock.advance(consumers.MIN_SEND_INTERVAL)  # one send may go now, never two
    got = [await communicator.receive_from(timeout=5)]
    clock.advance(consumers.MIN_SEND_INTERVAL)  # messages marked after it: the same state
    got += await receive_all(communicator, first=1.0)
    await finish(communicator)
    assert len(got) == 1, f"{len(got)} sends for 40 messages"
    assert ids(got[0]) == ["live-traffic", "live-chart-points"]
    # The charts' newest points ride along: this minute's holds all 40 requests.
    assert chart_points(got[0])[-1]["requests"] == 40
    # 40 requests in the five-minute window (four minutes and this one's seconds so far)
    seconds = max(clock.at - (clock.minute() - 4 * 60), 1)
    assert float(figure(got[0], "requests-per-minute")) == pytest.approx(40 * 60 / seconds, 0.01)
    assert figure(got[0], "success-rate") == "100%"


async def test_serving_metrics_and_deletion_fragments(org, viewer, layer):
    app = await sync_to_async(make_app)(org, phase="Running", ready_replicas=1, desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)
    from django.core.cache import cache

    from jobs.overview import serving_metrics

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


async def test_a_benchmark_started_or_ended_brings_the_benchmark_results(org, viewer, layer):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Benchmark, Revision

    app = await sync_to_async(make_app)(org, phase="Running", ready_replicas=1, desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    first = await communicator.receive_from(timeout=5)
    assert "data-benchmark-none" in first.split('id="benchmark-results"')[1]

    def started():
        revision = Revision.objects.create(application=app, number=1, manifest={})
        deadline = timezone.now() + timedelta(minutes=5)
        Benchmark.objects.create(
            application=app, revision=revision, task="chat", route="x", deadline=deadline
        )

    await sync_to_async(started)()
    await get_channel_layer().group_send(group_name(app), {"type": "benchmark.update"})
    got = await receive_all(communicator)
    await finish(communicator)
    assert len(got) == 1 and ids(got[0]) == ["benchmark-results"], got
    assert "A benchmark of revision 1 is running" in got[0]


async def test_dashboard_gets_phase_changes_of_the_applications_it_shows(
    org, other_org, viewer, layer
):
    chat = await sync_to_async(make_app)(org, "chat")
    await sync_to_async(make_app)(org, "embed")
    theirs = await sync_to_async(make_app)(other_org, "secret")
    cookie = await sync_to_async(session_cookie)(viewer.user)
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
    cookie = await sync_to_async(session_cookie)(viewer.user)
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
    cookie = await sync_to_async(session_cookie)(loner)
    communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert connected
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER == 4403
    await finish(communicator)


async def test_dashboard_sparklines_follow_usage(org, viewer, layer, clock):
    chat = await sync_to_async(make_app)(org, "chat")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/dashboard/?shown=chat", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the phases
    await sync_to_async(usage)(org, chat, clock.minute(), 7)
    await get_channel_layer().group_send(
        group_name(chat), {"type": "usage.update", "name": "chat", "requests": 7}
    )
    await get_channel_layer().group_send(  # the page's other messages are ignored here
        group_name(chat), {"type": "serving.metrics", "name": "chat", "requests_waiting": 1}
    )
    got = await receive_all(communicator)
    assert len(got) == 1 and ids(got[0]) == ["dash-spark-chat"]
    assert 'aria-label="7 requests in the last hour"' in got[0]

    # No traffic since: as each minute begins the sparkline moves on, until the hour holds none.
    clock.refresh(later_by=3600)
    got = await receive_all(communicator)
    await finish(communicator)
    assert got and ids(got[-1]) == ["dash-spark-chat"]
    assert 'aria-label="0 requests in the last hour"' in got[-1]


async def test_a_member_removed_while_listening_is_closed_not_shown_more(org, viewer, layer):
    """The socket checked membership at connect; a member removed (or who signed out) since
    gets no further fragment of the organisation's application, only the close code."""
    app = await sync_to_async(make_app)(org, phase="Pending")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    await sync_to_async(viewer.delete)()
    await sync_to_async(record_status)(app, Observed(phase="Running", reason="secret-ish"))
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER
    await finish(communicator)


async def test_a_dashboard_of_a_removed_member_is_closed(org, viewer, layer):
    chat = await sync_to_async(make_app)(org, "chat")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/dashboard/?shown=chat", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the phases
    await sync_to_async(viewer.delete)()
    await sync_to_async(record_status)(chat, Observed(phase="Running"))
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER
    await finish(communicator)


async def test_many_pages_opened_at_once_all_connect(org, viewer, layer, settings):
    """150 sockets joining their group at once: on Redis, more calls at once than redis-py's
    default pool of 100 connections, which it refuses rather than waits for."""
    settings.SERVEDECK_LIVE_SOCKETS_PER_USER = 200  # one user here stands for many
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    # Each connect reads the session and the membership in the one database thread: on a busy
    # machine the last of 150 waits for the rest, so what is tested is that all connect.
    opened = await asyncio.gather(
        *(connect("/ws/applications/chat/", ORIGIN, cookie, timeout=60) for _ in range(150))
    )
    try:
        assert all(connected for _, connected, _ in opened)
        firsts = await asyncio.gather(*(c.receive_from(timeout=60) for c, _, _ in opened))
        assert all('id="live-phase"' in first for first in firsts)
    finally:
        # Every socket is closed, even when one's channel layer call fails on the way out (a
        # Redis read timing out on a loaded machine): what is tested is the connecting.
        await asyncio.gather(*(c.disconnect() for c, _, _ in opened), return_exceptions=True)
        await sync_to_async(connections.close_all)()


async def test_a_status_repeating_an_earlier_one_brings_the_newest_events(org, viewer, layer):
    """Running, Updating, Running again: the second Running's message has the first one's
    fields, but what the page shows has moved on (the events, how long since): it is rendered
    again, never the first Running's rendering."""
    app = await sync_to_async(make_app)(org, phase="Loading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    running = Observed(phase="Running", endpoint="http://x", ready_replicas=1, desired_replicas=1)
    got = []
    for observed in (running, Observed(phase="Updating", desired_replicas=1), running):
        await sync_to_async(record_status)(app, observed)
        got.append(await communicator.receive_from(timeout=5))
    await finish(communicator)
    events = got[-1].split('id="live-events"')[1]
    assert events.count("<strong>Running</strong>") == 2 and "<strong>Updating</strong>" in events
    assert ">Running<" in got[-1].split('id="live-events"')[0]


async def test_a_status_saved_in_a_transaction_is_announced_once_committed(org, viewer, layer):
    """A page told of a change reads the application again: told before the commit, it would
    read the old state and keep it until the next change."""
    app = await sync_to_async(make_app)(org, phase="Loading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up

    def save_then_linger():
        with transaction.atomic():
            record_status(app, Observed(phase="Failed", reason="Saved in a transaction."))
            time.sleep(0.5)  # what the deploy or the reconciler's pass does next
        connections.close_all()

    await sync_to_async(save_then_linger, thread_sensitive=False)()
    got = await communicator.receive_from(timeout=5)
    await finish(communicator)
    assert "Saved in a transaction." in got


async def test_pages_that_got_the_same_message_share_one_rendering(org, viewer, layer):
    """Two pages of one application in this process: one rendering per fragment of a message,
    sent to both."""
    app = await sync_to_async(make_app)(org, phase="Loading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    pages = [(await connect("/ws/applications/chat/", ORIGIN, cookie))[0] for _ in range(2)]
    for page in pages:
        await page.receive_from(timeout=5)
    before = fragments.shared.renders
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason="It exited."))
    got = [await page.receive_from(timeout=5) for page in pages]
    for page in pages:
        await finish(page)
    assert got[0] == got[1] and "It exited." in got[0]
    assert fragments.shared.renders - before == 3  # status, events, serving: once each


async def test_pages_of_one_member_ask_the_database_once_a_second_whether_still_a_member(
    org, viewer, layer, clock
):
    """Five pages, three messages: every send checks the membership, the database is asked
    once while the check is fresh, and again once RECHECK_SECONDS have passed."""
    clock.held = True  # the sends' spacing and the membership's freshness: the test's clock
    app = await sync_to_async(make_app)(org, phase="Loading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    pages = [(await connect("/ws/applications/chat/", ORIGIN, cookie))[0] for _ in range(5)]
    for page in pages:
        await page.receive_from(timeout=5)
    before = members.queries
    for reason in ("One.", "Two.", "Three.", "Four."):
        if reason == "Four.":
            clock.advance(RECHECK_SECONDS)
        await sync_to_async(record_status)(app, Observed(phase="Failed", reason=reason))
        clock.advance(consumers.MIN_SEND_INTERVAL)
        got = [await page.receive_from(timeout=5) for page in pages]
        assert all(reason in html for html in got)
        assert members.queries - before == (2 if reason == "Four." else 1)
    for page in pages:
        await finish(page)


async def test_channel_layer_messages_are_marked_on_the_loop(org, viewer, layer, monkeypatch):
    """Each message to each page only marks fragments: no thread hop to close old database
    connections per message (Channels' dispatch does one for every handler)."""
    import channels.consumer

    hops = []
    close_old = channels.consumer.aclose_old_connections

    async def counted():
        hops.append(1)
        await close_old()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    app = await sync_to_async(make_app)(org, phase="Running")
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    before = len(hops)
    for kind in ("usage.update", "serving.metrics"):
        await get_channel_layer().group_send(group_name(app), {"type": kind, "name": "chat"})
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason="Marked."))
    got = await receive_all(communicator)
    marking_hops = len(hops) - before
    await finish(communicator)
    assert got and "Marked." in got[-1]
    assert marking_hops == 0


async def test_a_member_removed_by_another_process_is_closed_within_the_recheck(
    org, viewer, layer, clock
):
    """Removed with no signal in this process (as another console process would): the page is
    closed at its first send after RECHECK_SECONDS."""
    clock.held = True
    app = await sync_to_async(make_app)(org, phase="Loading", desired_replicas=1)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)  # the catch-up
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason="Seen."))
    clock.advance(consumers.MIN_SEND_INTERVAL)
    await communicator.receive_from(timeout=5)  # confirmed the membership
    await sync_to_async(viewer.__class__.objects.filter(pk=viewer.pk)._raw_delete)("default")
    clock.advance(RECHECK_SECONDS)
    await sync_to_async(record_status)(app, Observed(phase="Failed", reason="Not for you."))
    clock.advance(consumers.MIN_SEND_INTERVAL)
    assert await closed_with(communicator) == consumers.CLOSE_NOT_A_MEMBER
    await finish(communicator)


async def test_the_traffic_cards_move_on_when_traffic_stops(org, viewer, layer, clock):
    """No message comes once traffic stops, yet the five minutes' figures and the charts'
    newest minute change: the slow refresh sends them, and stops once they cannot change."""
    app = await sync_to_async(make_app)(org, phase="Running")
    await sync_to_async(usage)(org, app, clock.minute(), 30)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    first = await communicator.receive_from(timeout=5)
    assert float(figure(first, "requests-per-minute")) > 0
    assert figure(first, "success-rate") == "100%"

    clock.refresh()  # the same interval: nothing to send
    assert await communicator.receive_nothing(timeout=0.5)
    clock.refresh(later_by=60)  # a minute on: the charts' newest minute is a new one, idle
    later = await communicator.receive_from(timeout=5)
    assert ids(later) == ["live-traffic", "live-chart-points"]
    assert figure(later, "requests-per-minute") == figure(first, "requests-per-minute")
    assert chart_points(later)[-1] == {**chart_points(later)[-1], "requests": 0}
    assert chart_points(later)[-2]["requests"] == 30

    clock.refresh(later_by=5 * 60)  # out of the five minutes' window
    idle = await communicator.receive_from(timeout=5)
    assert figure(idle, "requests-per-minute") == "0"
    assert figure(idle, "success-rate") == "—"
    clock.refresh(later_by=consumers.REFRESH_SECONDS)  # same minute, idle: nothing changes
    assert await communicator.receive_nothing(timeout=0.5)
    await finish(communicator)


async def test_serving_figures_that_expired_are_cleared(org, viewer, layer, clock):
    app = await sync_to_async(make_app)(org, phase="Running", ready_replicas=1, desired_replicas=1)
    figures = {"requests_waiting": 3.0, "requests_running": 8.0, "kv_cache_usage": 0.42}
    await sync_to_async(cache.set)(serving_metrics.cache_key(app.pk), figures, 60)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert ">42%<" in await communicator.receive_from(timeout=5)
    await sync_to_async(cache.delete)(serving_metrics.cache_key(app.pk))  # scrapes stopped
    clock.refresh(later_by=consumers.REFRESH_SECONDS)
    got = await communicator.receive_from(timeout=5)
    await finish(communicator)
    assert ids(got) == ["live-serving"]
    assert figure(got, "kv-cache") == "—" and figure(got, "requests-waiting") == "—"


@pytest.mark.parametrize("shown", ["chat", ""])
async def test_the_dashboard_names_applications_deployed_since_it_opened(org, viewer, layer, shown):
    chat = await sync_to_async(make_app)(org, "chat")
    older = await sync_to_async(make_app)(org, "older")  # on another page of the table, say
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, connected, _ = await connect(f"/ws/dashboard/?shown={shown}", ORIGIN, cookie)
    assert connected
    if shown:
        await communicator.receive_from(timeout=5)  # the phases
    await sync_to_async(record_status)(older, Observed(phase="Running"))
    await sync_to_async(record_status)(chat, Observed(phase="Failed"))
    assert not any('id="dash-new"' in html for html in await receive_all(communicator))

    embed = await sync_to_async(make_app)(org, "embed")
    await sync_to_async(record_status)(embed, Observed(phase="Downloading"))
    got = await receive_all(communicator)
    assert len(got) == 1 and ids(got[0]) == ["dash-new"]
    assert "Deployed since this page opened: embed." in got[0]
    assert 'href="/?sort=-deployed_at"' in got[0]
    await sync_to_async(record_status)(embed, Observed(phase="Running"))  # named once
    assert await receive_all(communicator) == []
    await finish(communicator)


# --- sockets per user, and one refresh for them all --------------------------------------


async def test_a_user_past_the_cap_is_closed_too_many_others_are_not(
    org, viewer, deployer, layer, settings
):
    """The cap counts a user's sockets of every kind in this process; past it the socket is
    closed with its own code, another user's sockets still connect, and a socket closed frees
    a place."""
    settings.SERVEDECK_LIVE_SOCKETS_PER_USER = 3
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    paths = ["/ws/applications/chat/", "/ws/applications/chat/", "/ws/dashboard/?shown=chat"]
    pages = [(await connect(path, ORIGIN, cookie))[0] for path in paths]
    for page in pages:
        assert 'id="' in await page.receive_from(timeout=5)

    for path in ("/ws/applications/chat/", "/ws/dashboard/?shown=chat"):
        refused, connected, _ = await connect(path, ORIGIN, cookie)
        assert connected  # accepted so that the close code reaches the page
        assert await closed_with(refused) == consumers.CLOSE_TOO_MANY == 4429
        await finish(refused)
    assert consumers.open_sockets.count(viewer.user.pk) == 3  # the refused are not counted

    theirs, _, _ = await connect(
        "/ws/applications/chat/", ORIGIN, await sync_to_async(session_cookie)(deployer.user)
    )
    assert 'id="live-phase"' in await theirs.receive_from(timeout=5)
    await finish(pages.pop())
    again, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    assert 'id="live-phase"' in await again.receive_from(timeout=5)
    for page in (*pages, again, theirs):
        await finish(page)
    assert consumers.open_sockets.count(viewer.user.pk) == 0


async def test_one_refresh_timer_for_every_socket_of_the_process(org, viewer, layer, clock):
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    paths = ["/ws/applications/chat/"] * 3 + ["/ws/dashboard/?shown=chat"]
    pages = [(await connect(path, ORIGIN, cookie))[0] for path in paths]
    for page in pages:
        await page.receive_from(timeout=5)
    assert len(clock.refreshers) == 1  # not one waiting per socket
    for page in pages:
        await finish(page)
    assert consumers.open_sockets.ticker is None  # no socket left: no timer either


async def test_pages_refreshing_in_one_interval_share_one_rendering(org, viewer, layer, clock):
    """Three pages of one application that got no message since they connected: the slow
    refresh renders what time alone changed once for them all, and each gets it."""
    app = await sync_to_async(make_app)(org, phase="Running")
    await sync_to_async(usage)(org, app, clock.minute(), 30)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    pages = [(await connect("/ws/applications/chat/", ORIGIN, cookie))[0] for _ in range(3)]
    for page in pages:
        await page.receive_from(timeout=5)
    before = fragments.shared.renders
    clock.refresh(later_by=60)  # a minute on: the charts' newest minute, the five minutes' rate
    got = [await page.receive_from(timeout=5) for page in pages]
    for page in pages:
        await finish(page)
    assert ids(got[0]) == ["live-traffic", "live-chart-points"]
    assert got[0] == got[1] == got[2]
    assert fragments.shared.renders - before == 1


async def test_a_page_newer_than_the_shared_refresh_gets_its_own(org, viewer, layer, clock):
    """A refresh rendering is shared only with pages whose state is older than it: a page whose
    catch-up read the database after it was made (here with a wall clock set back, as a clock
    may be, so that the page is due in the same interval) gets a rendering of its own, never
    the older one."""
    app = await sync_to_async(make_app)(org, phase="Running")
    await sync_to_async(usage)(org, app, clock.minute(), 30)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    first, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await first.receive_from(timeout=5)
    clock.refresh(later_by=60)
    shared_one = await first.receive_from(timeout=5)
    assert chart_points(shared_one)[-2]["requests"] == 30

    clock.at -= 60  # back into the interval before (no refresh is due meanwhile)
    await sync_to_async(usage)(org, app, clock.minute(), 12)  # more traffic in that minute
    late, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    caught_up = await late.receive_from(timeout=5)
    assert chart_points(caught_up)[-1]["requests"] == 42
    clock.refresh(later_by=60)  # the first page's interval again: the late page is due
    newer = await late.receive_from(timeout=5)
    await finish(first)
    await finish(late)
    assert ids(newer) == ["live-traffic", "live-chart-points"]
    assert chart_points(newer)[-2]["requests"] == 42  # not the shared rendering's 30


class RefusingLayer(InMemoryChannelLayer):
    """A channel layer that does not let a socket join its group (as Redis gone away)."""

    async def group_add(self, group, channel):
        raise ConnectionError("the channel layer does not answer")


async def test_a_socket_whose_task_ends_without_a_disconnect_holds_no_place(org, viewer, layer):
    """The server cancels a socket's task (a client gone, a server shutting down): no
    disconnect runs, and the socket still gives its place back."""
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    communicator, _, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
    await communicator.receive_from(timeout=5)
    assert consumers.open_sockets.count(viewer.user.pk) == 1
    communicator.future.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await communicator.future
    assert consumers.open_sockets.count(viewer.user.pk) == 0
    assert consumers.open_sockets.ticker is None
    await sync_to_async(connections.close_all)()


async def test_a_socket_whose_connect_failed_holds_no_place(org, viewer, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.RefusingLayer"}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    await sync_to_async(make_app)(org)
    cookie = await sync_to_async(session_cookie)(viewer.user)
    try:
        communicator, connected, _ = await connect("/ws/applications/chat/", ORIGIN, cookie)
        assert connected  # accepted, then joining its group failed
        with pytest.raises(ConnectionError):
            await communicator.wait(timeout=5)  # the application ended with the layer's error
        assert consumers.open_sockets.count(viewer.user.pk) == 0
        assert consumers.open_sockets.ticker is None
    finally:
        channel_layers.backends.clear()
        await sync_to_async(connections.close_all)()
