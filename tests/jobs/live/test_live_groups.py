"""Announcing to live pages from whatever thread or loop the announcer runs on."""

import asyncio

import pytest
from channels.layers import get_channel_layer

from jobs.live import groups


@pytest.fixture
def closed_server_loop():
    """A server loop noted earlier in this process, gone since (a server started again)."""
    noted = groups._server_loop
    old = asyncio.new_event_loop()
    groups.note_server_loop(old)
    old.close()
    yield
    groups._server_loop = noted


def test_a_message_sent_on_the_loop_that_serves_now_arrives(closed_server_loop):
    """Sent from a running loop while the noted one is closed: that loop serves now (sending
    through a loop of its own cannot run inside it, and the message was lost)."""

    async def listen_then_send() -> dict:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("application.0", channel)
        groups.send([("application.0", {"type": "application.status", "phase": "Running"})])
        try:
            return await asyncio.wait_for(layer.receive(channel), 10)
        finally:
            await layer.group_discard("application.0", channel)

    message = asyncio.run(listen_then_send())
    assert message["phase"] == "Running" and message["message_id"]
