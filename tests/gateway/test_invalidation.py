"""What moves the change counter on the jobs side: an application's routed fields, not every
save; and the console's ASGI app sends /v1 to the gateway, the rest to Django."""

import asyncio

import pytest

from accesspolicies.models import ChangeCounter
from jobs.backends.base import Observed
from jobs.lifecycle import record_status
from tests.gateway.support import make_app
from tests.helpers import wait_for


def test_application_changes_bump_the_counter_unrelated_saves_do_not(org):
    app = make_app(org, "alpha", "http://127.0.0.1:9", phase="Loading")
    before = ChangeCounter.read()
    app.ready_replicas = 1
    app.save(update_fields=["ready_replicas"])
    app.desired_replicas = 2
    app.save()  # a full save that changes nothing routed
    assert ChangeCounter.read() == before
    record_status(app, Observed(phase="Running", endpoint="http://127.0.0.1:10"))
    assert ChangeCounter.read() == before + 1
    app.manifest = {**app.manifest, "metadata": {"x": 1}}
    app.save()
    assert ChangeCounter.read() == before + 2
    app.delete()
    assert ChangeCounter.read() == before + 3


@pytest.mark.django_db(transaction=True)
def test_the_console_app_mounts_the_gateway_at_v1():
    from console.asgi import application, gateway

    sent = []

    pending = []

    async def receive():
        if pending:
            return pending.pop()
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    async def get(path):
        sent.clear()
        pending[:] = [{"type": "http.request", "body": b"", "more_body": False}]
        scope = {
            "type": "http",
            "method": "GET",
            "path": path,
            "headers": [(b"host", b"localhost")],
            "query_string": b"",
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "scheme": "http",
            "root_path": "",
            "http_version": "1.1",
            "asgi": {"version": "3.0"},
        }
        await application(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], body

    async def run():
        try:
            return await get("/v1/models"), await get("/login/")
        finally:
            await gateway.shutdown()

    (status, body), (page_status, _) = asyncio.run(run())
    assert status == 401 and b'"authentication_error"' in body  # the gateway answered
    assert page_status == 200  # Django answered


@pytest.mark.django_db  # the keeper closes stale connections around each load
def test_a_keeper_started_again_after_stop_loads_and_follows_the_counter():
    """The console's gateway is shut down and started again (a lifespan restart, or a process
    forked from one whose keeper ran): it must load again and keep following changes. It used
    to stay on its old snapshot forever: a key made afterwards was never accepted."""
    from jobs.gateway.snapshot import Snapshot, SnapshotKeeper

    version = [1]
    keeper = SnapshotKeeper(
        loader=lambda v: Snapshot(version=v),
        counter=lambda: version[0],
        touch_writer=lambda ids: None,
        interval=0.01,
    )
    keeper.start()
    keeper.stop()
    version[0] = 2
    keeper.start()
    try:
        assert keeper.current.version == 2  # loaded again at start
        version[0] = 3
        wait_for(lambda: keeper.current.version == 3, "the restarted keeper never reloaded")
    finally:
        keeper.stop()


def test_a_database_not_ready_at_start_is_retried():
    from jobs.gateway.snapshot import Snapshot, SnapshotKeeper

    calls = []

    def counter():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("no such table")
        return 7

    keeper = SnapshotKeeper(
        loader=lambda v: Snapshot(version=v),
        counter=counter,
        touch_writer=lambda ids: None,
        interval=0.01,
    )
    keeper.start()
    try:
        import time

        deadline = time.monotonic() + 5
        while keeper.current.version != 7:
            if time.monotonic() > deadline:  # a wait with a limit, not a timing
                pytest.fail("the keeper never loaded after the failure")
            time.sleep(0.01)
    finally:
        keeper.stop()
