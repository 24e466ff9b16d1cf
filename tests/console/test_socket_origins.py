"""Issue 21, finding 12: a live socket's Origin must be the console's own origin (scheme, host
and port) or one of CSRF_TRUSTED_ORIGINS, as Django's CSRF check asks of a form's POST. Any
port of an allowed host was accepted before (another service on the same machine, or http for
an https console, could open a member's live pages with their cookie).

Through Channels' WebsocketCommunicator on the console's ASGI application. A handshake the
origin check refuses is never accepted; one it lets through is accepted, and (being anonymous
here) closed with 4401 by the consumer."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PATH = "/ws/dashboard/?shown="


async def opens(*headers: tuple[str, str], scheme: str = "ws") -> bool:
    """Whether the handshake with these headers gets past the origin check."""
    from console.asgi import application

    communicator = WebsocketCommunicator(
        application, PATH, headers=[(k.encode(), v.encode()) for k, v in headers]
    )
    communicator.scope["scheme"] = scheme
    connected, _ = await communicator.connect(timeout=5)
    await communicator.disconnect()
    await sync_to_async(connections.close_all)()
    return connected


@pytest.mark.parametrize(
    "origin, allowed",
    [
        ("http://127.0.0.1:8000", True),  # the console's own page
        ("http://127.0.0.1:9999", False),  # another port of the same host
        ("http://127.0.0.1", False),  # port 80: another server
        ("https://127.0.0.1:8000", False),  # another scheme
        ("http://localhost:8000", False),  # an allowed host, but not this console's address
        ("null", False),
        ("", False),
    ],
)
async def test_only_the_consoles_own_origin_opens_a_socket(origin, allowed):
    assert await opens(("host", "127.0.0.1:8000"), ("origin", origin)) is allowed


async def test_no_origin_is_refused():
    assert not await opens(("host", "127.0.0.1:8000"))


async def test_a_host_that_is_not_allowed_is_refused_even_from_its_own_page():
    """A name that resolves to the console (DNS rebinding) is not the console's origin."""
    assert not await opens(("host", "evil.example:8000"), ("origin", "http://evil.example:8000"))


async def test_an_https_console_takes_its_https_pages_only(settings):
    settings.ALLOWED_HOSTS = ["console.example.com"]
    own = ("host", "console.example.com")
    assert await opens(own, ("origin", "https://console.example.com"), scheme="wss")
    assert not await opens(own, ("origin", "http://console.example.com"), scheme="wss")
    assert not await opens(own, ("origin", "https://console.example.com:8443"), scheme="wss")


async def test_behind_a_proxy_that_says_https(settings):
    """TRUST_X_FORWARDED_PROTO: the proxy ended TLS, the handshake reached the console on ws."""
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    own, proxied = ("host", "console.example.com"), ("x-forwarded-proto", "https")
    assert await opens(own, proxied, ("origin", "https://console.example.com"))
    assert not await opens(own, proxied, ("origin", "http://console.example.com"))
    assert not await opens(own, ("origin", "https://console.example.com"))  # no header: http


async def test_the_trusted_origins_are_the_consoles_too(settings):
    """A proxy that sends the console its own address as Host: CSRF_TRUSTED_ORIGINS names the
    public origin, exactly or as *.domain, scheme and port included."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com", "https://*.models.example"]
    internal = ("host", "127.0.0.1:8000")
    assert await opens(internal, ("origin", "https://console.example.com"))
    assert await opens(internal, ("origin", "https://eu.models.example"))
    assert not await opens(internal, ("origin", "http://console.example.com"))
    assert not await opens(internal, ("origin", "https://console.example.com:8443"))
    assert not await opens(internal, ("origin", "http://eu.models.example"))
    assert not await opens(internal, ("origin", "https://models.example.evil"))
