"""The channel-layer groups live pages listen to, and sending to them from any thread.

The in-memory layer's queues belong to the event loop the consumers run on: a message sent
from another thread through a loop of its own (async_to_sync) would reach a queue whose waiter
never wakes. So once the server's loop is known (`note_server_loop`: the console's consumers,
the in-process reconciler and the gateway's meter note it), messages from other threads are
handed to it, in the order they were sent, without waiting for them. A process with no server
loop (`manage.py reconcile`, the command line) sends from one loop of its own, kept open so
that its Redis connections are reused.

Every message gets a `message_id` of its own: pages of one process that got the same message
share one rendering of it (jobs.live.fragments.shared), and a message repeating an earlier
one's fields (Running, Updating, Running again) is still a new message.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import uuid

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

SEND_TIMEOUT_SECONDS = 2.0
# Batches waiting for the server's loop; past this (a channel layer that does not answer)
# the oldest are dropped: live pages missing updates must never grow the process without end.
MAX_WAITING_BATCHES = 10_000

_server_loop: asyncio.AbstractEventLoop | None = None
_waiting: collections.deque = collections.deque()  # batches for the server's loop (its thread)
_drainer: asyncio.Task | None = None
_own_loop: asyncio.AbstractEventLoop | None = None
_own_loop_lock = threading.Lock()


def application_group(pk: int) -> str:
    """The live pages of one application: its overview, and the dashboards showing it (for
    their sparklines)."""
    return f"application.{pk}"


def dashboard_group(organization_pk: int) -> str:
    """The home dashboards of one organisation: phase changes of all its applications."""
    return f"dashboard.{organization_pk}"


def user_group(user_pk: int) -> str:
    """Every live page of one user, whatever it shows: told when the user's sessions end."""
    return f"user.{user_pk}"


def note_server_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Remember the loop this process's ASGI server runs on (the running one when not given)."""
    global _server_loop
    _server_loop = loop or asyncio.get_running_loop()


def send(messages: list[tuple[str, dict]]) -> None:
    """Send each (group, message) in order; never raises and never waits for the server's loop
    (a live page missing one update must never fail, or hold up, what announced it)."""
    if not messages or get_channel_layer() is None:
        return
    batch = [(group, {**message, "message_id": uuid.uuid4().hex}) for group, message in messages]
    loop, current = _server_loop, _running_loop()
    if current is not None and (loop is None or loop.is_closed() or not loop.is_running()):
        # Called on a running loop while the noted one is gone (a server started again in this
        # process): that loop serves now. run_until_complete below cannot run inside it.
        note_server_loop(current)
        loop = current
    try:
        if loop is not None and loop.is_running() and not loop.is_closed():
            if current is loop:
                _enqueue(batch)
            else:  # FIFO: batches from any thread reach the loop in the order sent
                loop.call_soon_threadsafe(_enqueue, batch)
            return
        with _own_loop_lock:
            global _own_loop
            if _own_loop is None or _own_loop.is_closed():
                _own_loop = asyncio.new_event_loop()
            _own_loop.run_until_complete(_send_batch(batch))
    except Exception:
        logger.exception("could not announce to live pages (%s)", threading.current_thread().name)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _enqueue(batch: list[tuple[str, dict]]) -> None:
    """On the server's loop: queue the batch; one task sends the queue in order."""
    global _drainer
    _waiting.append(batch)
    while len(_waiting) > MAX_WAITING_BATCHES:
        _waiting.popleft()
        logger.warning("live pages' messages are waiting too long: the oldest is dropped")
    loop = asyncio.get_running_loop()
    # A drainer of an earlier loop (a server started again in this process) never runs again.
    if _drainer is None or _drainer.done() or _drainer.get_loop() is not loop:
        _drainer = loop.create_task(_drain())


async def _drain() -> None:
    while _waiting:
        await _send_batch(_waiting.popleft())


async def _send_batch(batch: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()

    async def send_all() -> None:
        for group, message in batch:
            await layer.group_send(group, message)

    try:
        await asyncio.wait_for(send_all(), SEND_TIMEOUT_SECONDS)
    except Exception:
        logger.exception("could not send to the channel layer")
