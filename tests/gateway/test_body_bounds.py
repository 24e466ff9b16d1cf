"""A request body is bounded however the ASGI server hands it over: in one message as well as
in many (a server may pass a whole body at once, with no Content-Length to check first)."""

import asyncio
import json

from jobs.gateway.app import MAX_JSON_BODY, Gateway
from jobs.gateway.metering import Meter
from jobs.gateway.snapshot import SnapshotKeeper
from tests.gateway.support import make_key


def post_in_one_message(gateway: Gateway, key: str, body: bytes) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"authorization", f"Bearer {key}".encode())],  # no content-length
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    async def call():
        try:
            await gateway(scope, receive, send)
        finally:
            await gateway.shutdown()

    asyncio.run(call())
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_a_body_over_the_limit_in_one_message_is_413(transactional_db, org):
    _, plain = make_key(org)
    gateway = Gateway(meter=Meter(), keeper=SnapshotKeeper(), start_meter=False)
    body = json.dumps({"model": "alpha", "padding": "x" * MAX_JSON_BODY}).encode()
    assert post_in_one_message(gateway, plain, body) == 413
