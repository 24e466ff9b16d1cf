"""After each flush the meter sends one `usage.update` per application to its group
`application.<pk>` with the minute's figures: through the in-memory layer from the running event
loop the meter was started in, and through Redis (channels-redis) when REDIS_URL is set."""

import asyncio
import os
import uuid
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from jobs.gateway.metering import Meter, RequestRecord
from jobs.lifecycle import group_name
from jobs.models import Application


def make_application(org, name):
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}
    )


def records_for(app, count, **fields):
    fields = {
        "status": 200,
        "latency_ms": 20.0,
        "prompt_tokens": 2,
        "completion_tokens": 3,
    } | fields
    return [
        RequestRecord(
            at=datetime.now(UTC).timestamp(),
            organization_id=app.organization_id,
            application_id=app.pk,
            **fields,
        )
        for _ in range(count)
    ]


async def receive_all(layer, channel, timeout=1.0):
    messages = []
    while True:
        try:
            messages.append(await asyncio.wait_for(layer.receive(channel), timeout))
        except TimeoutError:
            return messages
        timeout = 0.2


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_one_message_per_application_per_flush_in_memory(org):
    app = await sync_to_async(make_application)(org, "chat")
    other = await sync_to_async(make_application)(org, "embed")
    layer = get_channel_layer()
    mine, theirs = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(group_name(app), mine)
    await layer.group_add(group_name(other), theirs)

    meter = Meter(interval=3600)
    meter.start()  # inside this loop: the messages are sent from it
    try:
        for rec in records_for(app, 3) + records_for(app, 1, status=502):
            meter.record(rec)
        for rec in records_for(other, 2, stream=True, ttft_ms=7.0):
            meter.record(rec)
        meter.record(RequestRecord(at=0.0, status=401, latency_ms=1.0))  # no application
        assert meter.flush()  # from the loop's thread: the write runs on a helper thread
        got = await receive_all(layer, mine)
        got_other = await receive_all(layer, theirs)

        for rec in records_for(app, 2):
            meter.record(rec)
        assert await sync_to_async(meter.flush)()
        again = await receive_all(layer, mine)
    finally:
        await sync_to_async(meter.stop)()
        await sync_to_async(connections.close_all)()  # the ORM calls' thread's connection

    assert len(got) == 1 and len(got_other) == 1
    message = got[0]
    assert message["type"] == "usage.update" and message["name"] == "chat"
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    assert datetime.fromisoformat(message["minute"]) <= minute
    assert (message["requests"], message["errors_5xx"]) == (4, 1)
    assert (message["prompt_tokens"], message["completion_tokens"]) == (8, 12)
    assert message["latency_p50_ms"] == pytest.approx(17.5)
    assert got_other[0]["name"] == "embed" and got_other[0]["ttft_avg_ms"] == 7.0
    # the next flush sends the minute's figures so far, not only what it added
    assert len(again) == 1 and again[0]["requests"] in (2, 6)  # 2 if a minute began between
    assert meter.totals()  # names learnt for /metrics
    assert {name for name, *_ in meter.totals()} == {"chat", "embed", ""}


@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (e.g. redis://.../13)"
)
@pytest.mark.django_db(transaction=True)
def test_messages_through_redis(org, settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [os.environ["REDIS_URL"]],
                "prefix": f"test-usage-{uuid.uuid4().hex[:8]}",
            },
        }
    }
    app = make_application(org, "chat")
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(app), channel)

    meter = Meter(interval=3600)
    meter.start()  # from a plain thread: the meter sends from its own loop
    try:
        for rec in records_for(app, 5):
            meter.record(rec)
        assert meter.flush()
        for rec in records_for(app, 1):
            meter.record(rec)
        assert meter.flush()
        got = async_to_sync(receive_all)(layer, channel)
    finally:
        meter.stop()
        async_to_sync(layer.group_discard)(group_name(app), channel)
    assert [m["type"] for m in got] == ["usage.update", "usage.update"]
    assert got[0]["name"] == "chat" and got[0]["requests"] == 5
    assert got[1]["requests"] in (6, 1)  # 1 if a minute began between the flushes
