"""The gateway's /metrics names every organisation's applications and their traffic, with no
key: it answers scrapers on loopback and private networks only, never a client from the
Internet (say, one calling a verified domain routed to the gateway)."""

import asyncio

import httpx
import pytest

from jobs.gateway.app import Gateway
from jobs.gateway.metering import Meter
from jobs.gateway.snapshot import SnapshotKeeper


def get_metrics(gateway: Gateway, client: str) -> tuple[int, bytes]:
    """GET /metrics straight through the ASGI interface, from the client address `client`."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/metrics",
        "raw_path": b"/metrics",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"chat.models.example.com")],
        "client": (client, 40000),
        "server": ("10.0.0.5", 8080),
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def call():
        try:
            await gateway(scope, receive, send)
        finally:
            await gateway.shutdown()

    asyncio.run(call())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def fresh_gateway() -> Gateway:
    return Gateway(meter=Meter(), keeper=SnapshotKeeper(), start_meter=False)


@pytest.mark.parametrize("client", ["127.0.0.1", "10.1.2.3", "192.168.1.9", "::1"])
def test_scrapers_on_private_networks_get_the_metrics(transactional_db, client):
    status, body = get_metrics(fresh_gateway(), client)
    assert status == 200 and b"servedeck_gateway_requests_total" in body


@pytest.mark.parametrize("client", ["203.0.113.7", "2001:db8::1", "::ffff:198.51.100.4"])
def test_a_client_from_the_internet_does_not(transactional_db, client):
    status, body = get_metrics(fresh_gateway(), client)
    assert status == 404
    assert b"servedeck_gateway" not in body
    assert set(httpx.Response(404, content=body).json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
