"""The live sockets: an application's overview (`/ws/applications/<name>/`) and the home
dashboard (`/ws/dashboard/?shown=<names>`), sending HTML fragments that htmx's WebSocket
extension swaps in by id.

Who may listen: a signed-in member of the application's organisation (the session's chosen
organisation, as on the pages). Others are accepted and closed at once with a close code
(a handshake refused before accept carries no code at all):

    4401  not signed in: sign in and open the page again
    4403  not a member of the session's organisation (or of any)
    4404  no application of that name in the organisation (another organisation's included)
    4400  the dashboard's `shown` list is malformed or too long
    4429  the user has SERVEDECK_LIVE_SOCKETS_PER_USER live sockets open in this process
          already: close some pages and reload this one (the page says so)

A member removed from the organisation (or a user deleted) while listening is closed with
4403 at the next send, never sent another fragment: membership is checked again each send. A
session that logged out, or whose user changed password or was deactivated, is closed with 4401:
at once through the user's group (jobs.live.members), and at the latest at the next send, where
the session is checked again with the membership.

Coalescing: each message marks the fragments it changes; a page gets at most one send every
MIN_SEND_INTERVAL seconds, each fragment rendered from the latest state when sent, so however
much traffic there is, the last state is what a page shows last. A page that connects (or
reconnects) gets every fragment first. A fragment is sent only when it differs from what the
page got last.

Refresh: some figures change with time alone, with no message to say so (the requests per
minute of the last five minutes once traffic stops, the charts' newest minute, a step's time,
serving figures that expire, the dashboard's sparklines). Every REFRESH_SECONDS one task of the
process (`open_sockets`, not one per socket) has each page mark again the fragments whose last
rendering said they would (jobs.live.fragments.Rendering); the pages of one application that
refresh in the same interval share one rendering, unless a page has newer state than it (see
fragments.SharedRenderings: the latest state still arrives last).

The dashboard also hears of applications created since it opened (its organisation's group
announces every status) and says so, with a link that shows them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import Http404
from django.utils import timezone

from accesspolicies.access import ORG_SESSION_KEY, membership_for
from jobs.live import fragments
from jobs.live.fragments import EACH_MINUTE, EACH_REFRESH, Rendering
from jobs.live.groups import application_group, dashboard_group, note_server_loop, user_group
from jobs.live.members import CONFIRMED, SIGNED_OUT, Listener, members
from jobs.models import Application

logger = logging.getLogger(__name__)

CLOSE_NOT_SIGNED_IN = 4401
CLOSE_NOT_A_MEMBER = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
CLOSE_TOO_MANY = 4429
MIN_SEND_INTERVAL = 0.25  # seconds: at most four sends a second per page
REFRESH_SECONDS = 10.0  # the slow refresh of what time alone changes
MAX_NEW_SHOWN = 20  # the dashboard names at most this many applications created since
MAX_SHOWN = 100  # the dashboard shows 50 a page
MAX_QUERY_BYTES = 8192
# The channel-layer messages a live page gets: each only marks fragments to send.
MARKING = frozenset({"application.status", "dashboard.status", "usage.update", "serving.metrics"})
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Clock:
    """Time as the sockets see it: the loop's, to space sends; the wall clock, for what the
    fragments show; and when the slow refresh is due. Tests drive one of their own (`clock`)."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def refresh_due(self) -> None:
        await asyncio.sleep(REFRESH_SECONDS)


clock = Clock()


def _membership(scope):
    """(The membership the socket listens as, None) or (None, the close code that refuses it)."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None, CLOSE_NOT_SIGNED_IN
    session = scope.get("session")
    chosen = session.get(ORG_SESSION_KEY) if session is not None else None
    membership = membership_for(user, chosen) if chosen else membership_for(user)
    if membership is None:
        return None, CLOSE_NOT_A_MEMBER
    return membership, None


def _listener(scope, membership) -> Listener:
    session = scope.get("session")
    key = session.session_key if session is not None else None
    return Listener(membership.pk, membership.user_id, key)


def _moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


class OpenSockets:
    """The live sockets open in this process, by user: at most
    settings.SERVEDECK_LIVE_SOCKETS_PER_USER each (every socket holds a group membership,
    renders and a share of the refresh), and one task that tells them all when the slow
    refresh is due. Used from the event loop only."""

    def __init__(self) -> None:
        self.by_user: dict[int, set[CoalescingConsumer]] = {}
        self.ticker: asyncio.Task | None = None

    def admit(self, user_pk: int, socket: CoalescingConsumer) -> bool:
        """Count the socket as the user's (False, uncounted, past the cap)."""
        mine = self.by_user.get(user_pk, set())
        if len(mine) >= settings.SERVEDECK_LIVE_SOCKETS_PER_USER:
            return False
        self.by_user[user_pk] = mine | {socket}
        loop = asyncio.get_running_loop()
        if self.ticker is None or self.ticker.done() or self.ticker.get_loop() is not loop:
            self.ticker = loop.create_task(self._refresh_forever())
        return True

    def release(self, user_pk: int, socket: CoalescingConsumer) -> None:
        mine = self.by_user.get(user_pk, set()) - {socket}
        if mine:
            self.by_user[user_pk] = mine
        else:
            self.by_user.pop(user_pk, None)
        if not self.by_user and self.ticker is not None:
            self.ticker.cancel()
            self.ticker = None

    def count(self, user_pk: int) -> int:
        return len(self.by_user.get(user_pk, ()))

    async def _refresh_forever(self) -> None:
        while True:
            await clock.refresh_due()
            at = clock.wall()
            for mine in list(self.by_user.values()):
                for socket in mine:
                    try:
                        socket.refresh(at)
                    except Exception:  # one socket's trouble must not stop every page's refresh
                        logger.exception("live page refresh failed")


open_sockets = OpenSockets()


class CoalescingConsumer(AsyncWebsocketConsumer):
    """Marks what changed; sends the latest rendering of it at most every MIN_SEND_INTERVAL,
    and marks again every REFRESH_SECONDS what time alone changes."""

    group: str = ""
    listener: Listener | None = None  # whose socket: checked again before every send
    user_pk: int | None = None  # counted in open_sockets while it is open
    session_group: str = ""  # the user's group, told when their sessions end

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            # However the socket ends (a connect or a handler failing, a cancelled task, a
            # channel layer failing in disconnect: none of these gets a disconnect), its place
            # among its user's sockets is given back, and it is refreshed no more.
            self.uncounted()

    async def dispatch(self, message) -> None:
        """A channel-layer message only marks what changed, on the loop: it skips Channels'
        close_old_connections, a thread hop for every message to every page (the renders'
        database_sync_to_async closes old connections around its own work)."""
        if message.get("type") in MARKING:
            await getattr(self, get_handler_name(message))(message)
            return
        await super().dispatch(message)

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    def admitted(self) -> bool:
        """Counted among its user's open sockets; False past the cap (refuse it)."""
        if not open_sockets.admit(self.user_pk, self):
            return False
        self.counted = True
        return True

    def uncounted(self) -> None:
        if getattr(self, "counted", False):
            open_sockets.release(self.user_pk, self)
            self.counted = False

    async def listen_for_session_end(self) -> None:
        """Join the user's group (after accept): a logout or a new password closes the page."""
        self.session_group = user_group(self.user_pk)
        await self.channel_layer.group_add(self.session_group, self.channel_name)

    async def end(self, code: int) -> None:
        """Close the socket; nothing more is sent to it."""
        self.ended = True
        self.dirty = {}
        await self.close(code=code)

    def start_coalescing(self) -> None:
        self.ended = False
        self.dirty: dict[str, object] = {}  # fragment -> the version (message) that dirtied it
        self.flusher: asyncio.Task | None = None
        self.last_sent = clock.monotonic()  # the catch-up that follows counts as a send
        self.last_html: dict[str, str] = {}  # fragment -> what this page got last

    def mark(self, names, version) -> None:
        for name in names:
            self.dirty[name] = version
        if self.flusher is None:
            self.flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        try:
            while self.dirty and not self.ended:
                wait = self.last_sent + MIN_SEND_INTERVAL - clock.monotonic()
                if wait > 0:
                    await clock.sleep(wait)
                batch, self.dirty = self.dirty, {}
                html = self._render_on_loop(batch)
                if html is None:
                    html = await database_sync_to_async(self._render_for_member)(batch)
                if self.ended:
                    return
                if isinstance(html, int):
                    await self.end(html)
                    return
                if html:
                    await self.send(text_data=html)
                    self.last_sent = clock.monotonic()
        finally:
            self.flusher = None

    def _render_on_loop(self, batch: dict) -> str | None:
        """The batch as _render_for_member gives it, without a thread or a query, when the
        membership was confirmed within the last second and the renderings are shared ones
        (hundreds of pages of one application under steady traffic); else None."""
        if not members.fresh(self.listener):
            return None
        renderings = self.render_shared(batch, clock.wall())
        return None if renderings is None else self.changed(renderings)

    def _render_for_member(self, batch: dict) -> str | int:
        """What of the batch differs from what the page has; once the listener is no longer a
        member, or its session no longer signed in, the code to close with (nothing rendered)."""
        verdict = members.confirm(self.listener)
        if verdict != CONFIRMED:
            return _close_code(verdict)
        return self.changed(self.render_batch(batch, clock.wall()))

    def changed(self, renderings: Iterator[tuple[str, str]]) -> str:
        parts = []
        for name, html in renderings:
            if self.last_html.get(name) != html:
                self.last_html[name] = html
                parts.append(html)
        return "".join(parts)

    def render_batch(self, batch: dict, at: float) -> Iterator[tuple[str, str]]:
        """(fragment, HTML) for each fragment of the batch, as of `at` (the wall clock)."""
        raise NotImplementedError

    def render_shared(self, batch: dict, at: float) -> Iterator[tuple[str, str]] | None:
        """render_batch's renderings when every one is shared already, else None."""
        return None

    def refresh(self, at: float) -> None:
        """Mark what time alone has changed since the page got it."""

    async def disconnect(self, code) -> None:
        self.uncounted()
        if getattr(self, "flusher", None) is not None:
            self.flusher.cancel()
        for group in (self.group, self.session_group):
            if group:
                await self.channel_layer.group_discard(group, self.channel_name)

    # -- the user's group (jobs.live.members) ---------------------------------------------

    async def session_ended(self, event: dict) -> None:
        """A logout: the page of that session is closed (others of the user stay)."""
        if self.listener is not None and event.get("session") == self.listener.session_key:
            await self.end(CLOSE_NOT_SIGNED_IN)

    async def session_check(self, event: dict) -> None:
        """The user changed (a new password, deactivated): is this session still signed in?"""
        verdict = await database_sync_to_async(members.confirm)(self.listener, recheck=True)
        if verdict != CONFIRMED and not getattr(self, "ended", False):
            await self.end(_close_code(verdict))


def _close_code(verdict: str) -> int:
    return CLOSE_NOT_SIGNED_IN if verdict == SIGNED_OUT else CLOSE_NOT_A_MEMBER


class ApplicationConsumer(CoalescingConsumer):
    """One application's overview: status (badge, steps, reason), events and the cards."""

    async def connect(self) -> None:
        note_server_loop()
        found, code = await database_sync_to_async(self._find)()
        if found is None:
            await self.refuse(code)
            return
        self.application_pk, self.name = found.pk, found.name
        # fragment -> how its last rendering changes with time alone, and when it was made
        self.changing: dict[str, tuple[str, float]] = {}
        # fragment -> a stamp taken after the page got its last rendering (SharedRenderings)
        self.stamps: dict[str, int] = {}
        if not self.admitted():
            await self.refuse(CLOSE_TOO_MANY)
            return
        self.group = application_group(found.pk)
        self.start_coalescing()
        await self.accept()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.listen_for_session_end()
        # Joined first, then the current state: nothing announced between is missed.
        html = await database_sync_to_async(self._catch_up)()
        await self.send(text_data=html)

    def _find(self):
        membership, code = _membership(self.scope)
        if membership is None:
            return None, code
        self.listener, self.user_pk = _listener(self.scope, membership), membership.user_id
        name = self.scope["url_route"]["kwargs"]["name"]
        try:
            return Application.objects.object_for_member(membership, name), None
        except Http404:
            return None, CLOSE_NOT_FOUND

    def _fresh(self) -> Application | None:
        return (
            Application.objects.select_related("profile")
            .defer("profile__machine_catalog", "profile__defaults")
            .filter(pk=self.application_pk)
            .first()
        )

    def _catch_up(self) -> str:
        at = clock.wall()
        application = self._fresh()
        if application is None:
            return fragments.deleted(self.name)
        moment = fragments.Moment(application, _moment(at))
        return self.changed(
            self._took(name, moment.render(name), at) for name in fragments.FRAGMENTS
        )

    def render_batch(self, batch: dict, at: float) -> Iterator[tuple[str, str]]:
        if "deleted" in batch:
            self.changing.clear()  # nothing of it changes any more
            yield "deleted", fragments.deleted(self.name)
            return
        found: list[fragments.Moment | None] = []  # read once, when a rendering is made

        def make(name: str):
            def rendering() -> Rendering:
                if not found:
                    application = self._fresh()
                    found.append(application and fragments.Moment(application, _moment(at)))
                if found[0] is None:
                    return Rendering("")
                return found[0].render(name)

            return rendering

        for name, version in batch.items():
            if version is None:  # a message of no message_id: shared with no other page
                rendering = make(name)()
            else:
                after = self.stamps.get(name, -1)
                rendering = fragments.shared.get(
                    self._shared(name, version), make(name), after=after
                )
            if found and found[0] is None:  # deleted since the message: say so, once
                yield from self.render_batch({"deleted": None}, at)
                return
            yield self._took(name, rendering, at)

    def render_shared(self, batch: dict, at: float) -> Iterator[tuple[str, str]] | None:
        kept = {}
        for name, version in batch.items():
            if version is None or name == "deleted":
                return None
            key = self._shared(name, version)
            kept[name] = fragments.shared.peek(key, after=self.stamps.get(name, -1))
            if kept[name] is None:
                return None
        return (self._took(name, rendering, at) for name, rendering in kept.items())

    def _shared(self, name: str, version) -> tuple:
        """What the pages of this application share a rendering of a fragment under."""
        return (name, self.application_pk, version)

    def _took(self, name: str, rendering: Rendering, at: float) -> tuple[str, str]:
        """The page gets this rendering: note when it changes next, and how new it is."""
        self.changing[name] = (rendering.changes, at)
        self.stamps[name] = fragments.shared.stamp()
        return name, rendering.html

    def refresh(self, at: float) -> None:
        interval = int(at // REFRESH_SECONDS)
        for name, (changes, rendered_at) in self.changing.items():
            due = (changes == EACH_REFRESH and int(rendered_at // REFRESH_SECONDS) != interval) or (
                changes == EACH_MINUTE and int(rendered_at // 60) != int(at // 60)
            )
            if due and name not in self.dirty:
                # Shared by every page of the application refreshing in this interval (a page
                # with newer state than the shared rendering gets its own: render_batch).
                self.mark([name], ("refresh", interval))

    # -- channel-layer messages (type "application.status" calls application_status) --------

    def marked(self, names: list[str], event: dict) -> None:
        self.mark(names, event.get("message_id"))

    async def application_status(self, event: dict) -> None:
        if event.get("deleted"):
            self.marked(["deleted"], event)
            return
        self.marked(["status", "events", "serving"], event)

    async def usage_update(self, event: dict) -> None:
        self.marked(["traffic"], event)

    async def serving_metrics(self, event: dict) -> None:
        self.marked(["serving"], event)

    async def benchmark_update(self, event: dict) -> None:
        self.marked(["benchmarks"], event)


class DashboardConsumer(CoalescingConsumer):
    """The home dashboard: the phase and replicas of the applications the page shows (from
    the organisation's dashboard group), their sparklines (each application's group brings its
    usage updates; the sparklines of one send come from one query), and the names of
    applications created since the page opened."""

    async def connect(self) -> None:
        note_server_loop()
        shown = self._shown()
        if shown is None:
            await self.refuse(CLOSE_BAD_REQUEST)
            return
        found, code = await database_sync_to_async(self._find)(shown)
        if found is None:
            await self.refuse(code)
            return
        self.organization_pk, applications = found
        if not self.admitted():
            await self.refuse(CLOSE_TOO_MANY)
            return
        self.shown = {a.name for a in applications}
        self.by_name = {a.name: SimpleNamespace(pk=a.pk, name=a.name) for a in applications}
        self.group = dashboard_group(self.organization_pk)
        self.usage_groups = [application_group(a.pk) for a in applications]
        self.opened = timezone.now()  # as created_at is written, whatever the sockets' clock
        self.new: list[str] = []  # created since the page opened, in the order heard of
        self.not_new: set[str] = set()  # names heard of that the page may simply not show
        self.sparks_at = clock.wall()  # the page's sparklines are as of about now
        self.start_coalescing()
        await self.accept()
        for group in (self.group, *self.usage_groups):
            await self.channel_layer.group_add(group, self.channel_name)
        await self.listen_for_session_end()
        if applications:
            phases = [(a.name, fragments.dashboard_phase(a)) for a in applications]
            await self.send(text_data=self.changed(iter(phases)))

    def _shown(self) -> list[str] | None:
        raw = self.scope.get("query_string", b"")
        if len(raw) > MAX_QUERY_BYTES:
            return None
        values = parse_qs(raw.decode("ascii", "replace")).get("shown", [""])
        names = [n for n in values[0].split(",") if n]
        if len(names) > MAX_SHOWN or not all(NAME.match(n) for n in names):
            return None
        return names

    def _find(self, shown: list[str]):
        membership, code = _membership(self.scope)
        if membership is None:
            return None, code
        self.listener, self.user_pk = _listener(self.scope, membership), membership.user_id
        applications = list(
            Application.objects.for_member(membership)
            .filter(name__in=shown)
            .only("pk", "name", "phase", "ready_replicas", "desired_replicas", "organization")
        )
        return (membership.organization_id, applications), None

    def render_batch(self, batch: dict, at: float) -> Iterator[tuple[str, str]]:
        sparks, heard = [], []
        for name, version in batch.items():
            if name.startswith("spark:"):
                sparks.append(self.by_name[name.removeprefix("spark:")])
            elif name.startswith("new:"):
                heard.append(name.removeprefix("new:"))
            else:
                yield name, fragments.dashboard_phase(SimpleNamespace(**dict(version)))
        if sparks:
            self.sparks_at = at
            yield "sparks", fragments.dashboard_sparklines(sparks, _moment(at))
        if heard and self._learn_new(heard):
            yield "new", fragments.dashboard_new(self.new)

    def _learn_new(self, heard: list[str]) -> bool:
        """Which of the names heard of are applications created since the page opened (one
        query); True when there are more of them to name."""
        created = set(
            Application.objects.filter(
                organization_id=self.organization_pk, name__in=heard, created_at__gt=self.opened
            ).values_list("name", flat=True)
        )
        self.not_new.update(set(heard) - created)
        fresh = [name for name in heard if name in created and name not in self.new]
        self.new.extend(fresh)
        return bool(fresh)

    def refresh(self, at: float) -> None:
        # The sparklines are the last hour's minutes: they move on as each minute begins.
        if self.shown and int(at // 60) != int(self.sparks_at // 60):
            self.mark([f"spark:{name}" for name in sorted(self.shown)], None)

    async def disconnect(self, code) -> None:
        await super().disconnect(code)
        for group in getattr(self, "usage_groups", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def dashboard_status(self, event: dict) -> None:
        name = event.get("name")
        if name in self.shown:
            self.mark([name], tuple(sorted(event.items())))
            return
        heard_before = name in self.not_new or name in self.new
        room = len(self.new) < MAX_NEW_SHOWN  # the page names a few; a reload shows them all
        if name and not event.get("deleted") and not heard_before and room:
            self.mark([f"new:{name}"], None)

    async def usage_update(self, event: dict) -> None:
        if event.get("name") in self.shown:
            self.mark([f"spark:{event['name']}"], None)

    async def application_status(self, event: dict) -> None:
        """Also sent to the application's group: dashboard_status carries it here."""

    async def serving_metrics(self, event: dict) -> None:
        """Not shown on the dashboard."""
