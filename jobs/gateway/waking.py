"""Requests to a sleeping application (minReplicas 0): held while it wakes, in a bounded queue
per application and per key, then sent on as usual once its replicas are ready.

The first request asks for the wake (jobs.reconciler.sleeping.wake: one conditional UPDATE,
so exactly one wake across gateway processes; in this process one call per application at a
time). A streaming caller gets SSE comment lines with the phase while it waits, which OpenAI
clients ignore; a plain caller waits up to SERVEDECK_WAKE_WAIT, then a 503 with Retry-After from the
application's recent wakes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from jobs.status.phases import Phase

from .errors import GatewayError
from .request import not_running
from .snapshot import Route, SnapshotKeeper

logger = logging.getLogger(__name__)

WAKE_WAIT_SECONDS = 120.0
HOLD_PER_APPLICATION = 1000
HOLD_PER_KEY = 100
# Until the first wake of an application is timed: what Retry-After says.
FIRST_WAKE_GUESS_SECONDS = 60.0
POLL_SECONDS = 0.1
COMMENT_EVERY_SECONDS = 1.0
# The phases a woken application goes through before Running: its requests wait through them.
WAKING = frozenset(
    {Phase.SLEEPING, Phase.PENDING, Phase.SCHEDULING, Phase.DOWNLOADING, Phase.LOADING}
)
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def holds(route: Route) -> bool:
    """Whether a request to this not-running route waits for it rather than being refused."""
    return route.sleeps and route.phase in WAKING


def retry_after(route: Route, waited: float) -> int:
    """Seconds to tell a caller to come back in: the expected wake time less what has passed."""
    expected = route.wake_seconds if route.wake_seconds is not None else FIRST_WAKE_GUESS_SECONDS
    return max(1, math.ceil(expected - waited))


class HeldStream:
    """The ASGI `send` of a streaming caller held during a wake: the SSE headers go out at once,
    comment lines while it waits, and the model server's own headers, when they come, are
    dropped; an error answer after that goes out as one SSE data event."""

    def __init__(self, send) -> None:
        self.send = send
        self.opened = False  # until then (a refusal before the wait) everything passes as is
        self.error = False

    async def open(self) -> None:
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        self.opened = True

    async def comment(self, text: str) -> None:
        await self.send(
            {"type": "http.response.body", "body": f": {text}\n\n".encode(), "more_body": True}
        )

    async def __call__(self, message) -> None:
        if not self.opened:
            await self.send(message)
            return
        if message["type"] == "http.response.start":
            self.error = message["status"] >= 400
            return
        if self.error and message["type"] == "http.response.body":
            body = message.get("body", b"").replace(b"\n", b" ")
            more = message.get("more_body", False)
            event = b"data: " + body + b"\n\n"
            await self.send({"type": "http.response.body", "body": event, "more_body": more})
            return
        await self.send(message)


class Waker:
    """This process's held requests and the wakes it asked for."""

    def __init__(
        self,
        keeper: SnapshotKeeper,
        wake: Callable[[int], bool] | None = None,
        wait: float = WAKE_WAIT_SECONDS,
    ) -> None:
        self.keeper = keeper
        self.wake = wake or _wake_in_database
        self.wait = wait
        self.per_application = HOLD_PER_APPLICATION
        self.per_key = HOLD_PER_KEY
        self.held: dict[int, int] = {}
        self.held_per_key: dict[tuple[int, int], int] = {}
        # application id -> (its wake call, when it was made): one at a time per application
        self.waking: dict[int, tuple[asyncio.Future, float]] = {}
        self.wakes_asked = 0
        self.wake_calls_done = 0  # wake calls that returned, whatever their outcome

    async def hold(self, route: Route, key_id: int, held: HeldStream | None) -> Route:
        """Wait until `route` runs and return it as it runs; `held`: a streaming caller's."""
        if not holds(route):
            raise not_running(route)
        pair = (route.id, key_id)
        if self.held_per_key.get(pair, 0) >= self.per_key:
            raise self._full(route, f"this key has {self.per_key} requests waiting for it")
        if self.held.get(route.id, 0) >= self.per_application:
            raise self._full(route, f"{self.per_application} requests are waiting for it")
        self.held[route.id] = self.held.get(route.id, 0) + 1
        self.held_per_key[pair] = self.held_per_key.get(pair, 0) + 1
        try:
            return await self._wait(route, held)
        finally:
            self.held[route.id] -= 1
            self.held_per_key[pair] -= 1
            if not self.held[route.id]:
                del self.held[route.id]
            if not self.held_per_key[pair]:
                del self.held_per_key[pair]

    async def _wait(self, route: Route, held: HeldStream | None) -> Route:
        started = time.monotonic()
        if held is not None:
            await held.open()
        said = -COMMENT_EVERY_SECONDS
        current = route
        while True:
            if current.phase == Phase.SLEEPING:
                self._ask_wake(current.id)
            waited = time.monotonic() - started
            if held is not None and waited - said >= COMMENT_EVERY_SECONDS:
                await held.comment(f"waking, phase {current.phase}")
                said = waited
            if waited >= self.wait:
                raise GatewayError(
                    503,
                    f"The model '{route.name}' is waking from sleep (it is {current.phase}) "
                    "and was not ready in time; try again shortly.",
                    "model",
                    code="model_waking",
                    headers=((b"retry-after", str(retry_after(current, waited)).encode()),),
                )
            await asyncio.sleep(POLL_SECONDS)
            found = self.keeper.current.routes.get((route.organization_id, route.name))
            if found is None or found.id != route.id:
                raise not_running(current)
            current = found
            if current.phase != Phase.SLEEPING:
                self.waking.pop(route.id, None)
            if current.running:
                return current
            if not holds(current):
                raise not_running(current)

    async def slept_meanwhile(self, route: Route) -> Route | None:
        """The route as it is now if it went to sleep since the snapshot that said it runs
        (its replica could not be reached: the reconciler had stopped it); else None."""
        snapshot = await self.keeper.fresh(time.perf_counter())
        found = snapshot.routes.get((route.organization_id, route.name))
        if found is None or found.id != route.id or not holds(found):
            return None
        return found

    def _ask_wake(self, application_id: int) -> None:
        """Ask for the wake unless this process asked already: one call in flight at a time,
        none after one that won (until the snapshot shows it awake), and at most one a second
        while another process's wake is not in the snapshot yet."""
        asked = self.waking.get(application_id)
        now = time.monotonic()
        if asked is not None:
            future, at = asked
            if not future.done() or future.result() or now - at < 1.0:
                return
        self.wakes_asked += 1
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, self._wake, application_id)
        self.waking[application_id] = (future, now)

    def _wake(self, application_id: int) -> bool:
        try:
            return self.wake(application_id)
        except Exception:
            logger.exception("gateway: could not wake application %s", application_id)
            return False
        finally:
            self.wake_calls_done += 1

    def _full(self, route: Route, why: str) -> GatewayError:
        return GatewayError(
            429,
            f"The model '{route.name}' is waking from sleep and {why}; try again shortly.",
            "model",
            code="wake_queue_full",
            headers=((b"retry-after", str(retry_after(route, 0.0)).encode()),),
        )


def _wake_in_database(application_id: int) -> bool:
    from django.db import close_old_connections

    from jobs.reconciler import sleeping

    close_old_connections()
    return sleeping.wake(application_id)
