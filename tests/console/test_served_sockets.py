"""The console's server (uvicorn with wsproto, as scripts/run.sh starts it) serves the live
pages' sockets through Channels: a signed-in member's dashboard socket stays open, an anonymous
one is closed with the consumer's own code, and a socket from another site's page is refused."""

from __future__ import annotations

import socket

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request

from jobs.live.consumers import CLOSE_NOT_SIGNED_IN
from tests.console.console_process import ConsoleProcess

pytestmark = pytest.mark.database_file  # the console is another process: a database file


@pytest.fixture
def console(transactional_db, tmp_path):
    server = ConsoleProcess(tmp_path)
    yield server
    server.stop()


def with_password(user, password: str) -> None:
    """A password the console process checks: the tests' own hasher (MD5, for speed) is not
    one the console's settings know."""
    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(password, hasher.salt(), iterations=1000)
    user.save(update_fields=["password"])


def session_cookie(console, username: str, password: str) -> str:
    with httpx.Client(base_url=console.url, trust_env=False, timeout=30) as client:
        page = client.get("/login/")
        token = page.text.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
        client.post(
            "/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": console.url + "/login/"},
        )
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


def open_socket(console, path: str, origin: str, cookie: str = "") -> list:
    """The events of a WebSocket handshake to `path` and what follows it (up to a close)."""
    ws = WSConnection(ConnectionType.CLIENT)
    extra = [("Origin", origin)] + ([("Cookie", cookie)] if cookie else [])
    sock = socket.create_connection(("127.0.0.1", console.port), timeout=10)
    events = []
    try:
        sock.sendall(
            ws.send(Request(host=f"127.0.0.1:{console.port}", target=path, extra_headers=extra))
        )
        while not any(isinstance(e, (CloseConnection, RejectConnection)) for e in events):
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break  # still open after the wait: it was kept
            ws.receive_data(data or None)
            events.extend(ws.events())
            if not data:
                break
            if any(isinstance(e, AcceptConnection) for e in events) and cookie:
                sock.settimeout(2)  # a kept socket sends nothing unasked: wait a little
    finally:
        sock.close()
    return events


def test_a_member_socket_is_kept_and_an_anonymous_one_closed_with_its_code(console, admin):
    origin = console.url
    anonymous = open_socket(console, "/ws/dashboard/", origin)
    assert isinstance(anonymous[0], AcceptConnection), anonymous
    closed = [e for e in anonymous if isinstance(e, CloseConnection)]
    assert closed and closed[0].code == CLOSE_NOT_SIGNED_IN

    with_password(admin.user, "a-password")
    cookie = session_cookie(console, admin.user.username, "a-password")
    member = open_socket(console, "/ws/dashboard/", origin, cookie)
    assert isinstance(member[0], AcceptConnection), member
    assert not any(isinstance(e, CloseConnection) for e in member), member


def test_a_socket_from_another_sites_page_is_refused(console):
    events = open_socket(console, "/ws/dashboard/", "http://evil.example")
    assert not any(isinstance(e, AcceptConnection) for e in events), events
