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

A member removed from the organisation (or a user deleted) while listening is closed with
4403 at the next send, never sent another fragment: membership is checked again each send.

Coalescing: each message marks the fragments it changes; a page gets at most one send every
MIN_SEND_INTERVAL seconds, each fragment rendered from the latest state when sent, so however
much traffic there is, the last state is what a page shows last. A page that connects (or
reconnects) gets every fragment first.
"""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.http import Http404

from accesspolicies.access import ORG_SESSION_KEY, membership_for
from accesspolicies.models import Membership
from jobs.live import fragments
from jobs.live.groups import application_group, dashboard_group, note_server_loop
from jobs.models import Application

CLOSE_NOT_SIGNED_IN = 4401
CLOSE_NOT_A_MEMBER = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
MIN_SEND_INTERVAL = 0.25  # seconds: at most four sends a second per page
MAX_SHOWN = 100  # the dashboard shows 50 a page
MAX_QUERY_BYTES = 8192
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _membership(scope):
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None, CLOSE_NOT_SIGNED_IN
    session = scope.get("session")
    chosen = session.get(ORG_SESSION_KEY) if session is not None else None
    membership = membership_for(user, chosen) if chosen else membership_for(user)
    if membership is None:
        return None, CLOSE_NOT_A_MEMBER
    return membership, None


class CoalescingConsumer(AsyncWebsocketConsumer):
    """Marks what changed; sends the latest rendering of it at most every MIN_SEND_INTERVAL."""

    group: str = ""
    membership_pk: int | None = None  # whose socket: checked again before every send

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    def start_coalescing(self) -> None:
        self.dirty: dict[str, tuple] = {}  # fragment -> the version (message) that dirtied it
        self.flusher: asyncio.Task | None = None
        self.last_sent = 0.0
        self.sent = 0

    def mark(self, names, version: tuple) -> None:
        for name in names:
            self.dirty[name] = version
        if self.flusher is None:
            self.flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.dirty:
                wait = self.last_sent + MIN_SEND_INTERVAL - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                batch, self.dirty = self.dirty, {}
                html = await database_sync_to_async(self._render_for_member)(batch)
                if html is None:
                    await self.close(code=CLOSE_NOT_A_MEMBER)
                    return
                if html:
                    await self.send(text_data=html)
                    self.sent += 1
                self.last_sent = loop.time()
        finally:
            self.flusher = None

    def _render_for_member(self, batch: dict[str, tuple]) -> str | None:
        """The batch's HTML; None once the listener is no longer a member (nothing rendered)."""
        if not Membership.objects.filter(pk=self.membership_pk).exists():
            return None
        return self.render_batch(batch)

    def render_batch(self, batch: dict[str, tuple]) -> str:
        raise NotImplementedError

    async def disconnect(self, code) -> None:
        flusher = getattr(self, "flusher", None)
        if flusher is not None:
            flusher.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)


class ApplicationConsumer(CoalescingConsumer):
    """One application's overview: status (badge, steps, reason), events and the cards."""

    async def connect(self) -> None:
        note_server_loop()
        found, code = await database_sync_to_async(self._find)()
        if found is None:
            await self.refuse(code)
            return
        self.application_pk, self.name = found.pk, found.name
        self.group = application_group(found.pk)
        self.start_coalescing()
        await self.accept()
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Joined first, then the current state: nothing announced between is missed.
        html = await database_sync_to_async(self._catch_up)()
        await self.send(text_data=html)

    def _find(self):
        membership, code = _membership(self.scope)
        if membership is None:
            return None, code
        self.membership_pk = membership.pk
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
        application = self._fresh()
        if application is None:
            return fragments.deleted(self.name)
        return fragments.render(list(fragments.FRAGMENTS), application)

    def render_batch(self, batch: dict[str, tuple]) -> str:
        if "deleted" in batch:
            return fragments.deleted(self.name)
        application: list[Application | None] = []

        def make(name: str):
            def rendering() -> str:
                if not application:
                    application.append(self._fresh())
                if application[0] is None:
                    return fragments.deleted(self.name)
                return fragments.render([name], application[0])

            return rendering

        return "".join(
            fragments.shared.get((name, self.application_pk, version), make(name))
            for name, version in batch.items()
        )

    # -- channel-layer messages (type "application.status" calls application_status) --------

    async def application_status(self, event: dict) -> None:
        version = tuple(sorted(event.items()))
        if event.get("deleted"):
            self.mark(["deleted"], version)
            return
        self.mark(["status", "events", "serving"], version)

    async def usage_update(self, event: dict) -> None:
        self.mark(["traffic"], tuple(sorted(event.items())))

    async def serving_metrics(self, event: dict) -> None:
        self.mark(["serving"], tuple(sorted(event.items())))


class DashboardConsumer(CoalescingConsumer):
    """The home dashboard: the phase and replicas of the applications the page shows (from
    the organisation's dashboard group), and their sparklines (each application's group
    brings its usage updates; the sparklines of one send come from one query)."""

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
        organization_pk, applications = found
        self.shown = {a.name for a in applications}
        self.by_name = {a.name: SimpleNamespace(pk=a.pk, name=a.name) for a in applications}
        self.group = dashboard_group(organization_pk)
        self.usage_groups = [application_group(a.pk) for a in applications]
        self.start_coalescing()
        await self.accept()
        for group in (self.group, *self.usage_groups):
            await self.channel_layer.group_add(group, self.channel_name)
        if applications:
            await self.send(text_data="".join(fragments.dashboard_phase(a) for a in applications))

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
        self.membership_pk = membership.pk
        applications = list(
            Application.objects.for_member(membership)
            .filter(name__in=shown)
            .only("pk", "name", "phase", "ready_replicas", "desired_replicas", "organization")
        )
        return (membership.organization_id, applications), None

    def render_batch(self, batch: dict[str, tuple]) -> str:
        parts, sparks = [], []
        for name, version in batch.items():
            if name.startswith("spark:"):
                sparks.append(self.by_name[name.removeprefix("spark:")])
            else:
                parts.append(fragments.dashboard_phase(SimpleNamespace(**dict(version))))
        if sparks:
            parts.append(fragments.dashboard_sparklines(sparks))
        return "".join(parts)

    async def disconnect(self, code) -> None:
        await super().disconnect(code)
        for group in getattr(self, "usage_groups", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def dashboard_status(self, event: dict) -> None:
        if event.get("name") in self.shown:
            self.mark([event["name"]], tuple(sorted(event.items())))

    async def usage_update(self, event: dict) -> None:
        if event.get("name") in self.shown:
            self.mark([f"spark:{event['name']}"], tuple(sorted(event.items())))

    async def application_status(self, event: dict) -> None:
        """Also sent to the application's group: dashboard_status carries it here."""

    async def serving_metrics(self, event: dict) -> None:
        """Not shown on the dashboard."""
