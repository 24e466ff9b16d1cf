"""On the embedded defaults (the in-memory channel layer) the reconciler runs inside the
console's process: started once by the first ASGI call, its announcements reach a live page
of the same process, and stopping it stops the local model servers it followed."""

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.db import connections

from jobs import deploy as verbs
from jobs.reconciler import in_process
from tests.helpers import SHORTEST, session_cookie

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_status_changes_reach_the_page_from_the_reconciler_in_this_process(
    deployer, settings
):
    # The embedded defaults, whatever this run is pointed at: the in-memory layer, which
    # reaches only this process, and the reconciler inside it.
    settings.SERVEDECK_RECONCILER_IN_PROCESS = True
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    app = (await sync_to_async(verbs.apply)(SHORTEST, deployer)).application
    from console.asgi import application

    headers = [
        (b"host", b"127.0.0.1"),
        (b"origin", b"http://127.0.0.1"),
        await sync_to_async(session_cookie)(deployer.user),
    ]
    communicator = WebsocketCommunicator(application, "/ws/applications/bge-embed/", headers)
    try:
        connected, _ = await communicator.connect(timeout=5)
        assert connected and in_process.running()
        assert not in_process.start_once()  # once per process
        seen = [await communicator.receive_from(timeout=5)]  # the catch-up
        while 'id="live-phase" class="phase phase-running"' not in seen[-1]:
            seen.append(await communicator.receive_from(timeout=20))
        await app.arefresh_from_db()
        endpoint = app.endpoint
        assert endpoint and "1 of 1" in seen[-1]
    finally:
        await communicator.disconnect()
        await sync_to_async(in_process.stop)()
        await sync_to_async(connections.close_all)()
        channel_layers.backends.clear()
    assert not in_process.running()
    # the reconciler's exit stopped the local model server it followed
    with pytest.raises(httpx.HTTPError):
        httpx.get(endpoint + "/v1/models", timeout=1)


async def test_off_with_the_setting(settings):
    settings.SERVEDECK_RECONCILER_IN_PROCESS = False
    assert not in_process.start_once() and not in_process.running()
