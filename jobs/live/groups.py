"""The channel-layer groups live pages listen to, and sending to them from any thread.

The in-memory layer's queues belong to the event loop the consumers run on: a message sent
from another thread through a loop of its own (async_to_sync) would reach a queue whose waiter
never wakes. So once the console's loop is known (`note_console_loop`, called by every consumer
and by the in-process reconciler's start), messages from other threads are handed to it.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

SEND_TIMEOUT_SECONDS = 2.0
_console_loop: asyncio.AbstractEventLoop | None = None


def application_group(pk: int) -> str:
    """Every live page of one application (its overview, its health view)."""
    return f"application.{pk}"


def dashboard_group(organization_pk: int) -> str:
    """The home dashboards of one organisation: phase changes of all its applications."""
    return f"dashboard.{organization_pk}"


def note_console_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Remember the loop the console's consumers run on (the running one when not given)."""
    global _console_loop
    _console_loop = loop or asyncio.get_running_loop()


def send(messages: list[tuple[str, dict]]) -> None:
    """Send each (group, message) in order; never raises (a live page missing one update
    must never fail what announced it)."""
    layer = get_channel_layer()
    if layer is None or not messages:
        return

    async def send_all() -> None:
        for group, message in messages:
            await layer.group_send(group, message)

    loop = _console_loop
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    try:
        if loop is not None and loop.is_running() and not loop.is_closed():
            if running is loop:  # on the console's loop itself: no blocking here
                loop.create_task(send_all())
                return
            future = asyncio.run_coroutine_threadsafe(send_all(), loop)
            future.result(timeout=SEND_TIMEOUT_SECONDS)
            return
        async_to_sync(send_all)()
    except Exception:
        logger.exception("could not announce to live pages (%s)", threading.current_thread().name)
