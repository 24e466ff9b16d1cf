"""The gateway calls an application's own model server and no other host: a redirect in a
model server's answer is never followed (it could point the gateway, with the caller's body,
at any address its network reaches, and hand that address's answer back to the caller)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.gateway.support import caught_up, make_app, make_key


class Elsewhere(BaseHTTPRequestHandler):
    """Another host on the gateway's network (say, a cloud metadata service): counts visits."""

    visits: list[str] = []

    def _answer(self) -> None:
        type(self).visits.append(f"{self.command} {self.path}")
        body = b'{"secret": "from elsewhere"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def serve(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def elsewhere():
    Elsewhere.visits = []
    server = serve(Elsewhere)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(params=[307, 302])
def redirecting(request, elsewhere):
    status = request.param

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Location", elsewhere + "/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = serve(Redirecting)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_redirect_from_the_model_server_is_not_followed(gateway, org, redirecting):
    make_app(org, "alpha", redirecting)
    _, plain = make_key(org)
    caught_up(gateway)
    reply = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert Elsewhere.visits == []
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "redirect" in error["message"] and "from elsewhere" not in reply.text
    assert [r.status for r in gateway.meter.settled(1)] == [502]


def test_a_redirect_from_the_speech_runtime_is_not_followed(gateway, org, redirecting):
    make_app(org, "speech", redirecting, runtime="parakeet")
    _, plain = make_key(org)
    caught_up(gateway)
    reply = httpx.post(
        gateway.url + "/v1/audio/transcriptions",
        headers={"Authorization": f"Bearer {plain}"},
        data={"model": "speech"},
        files={"file": ("a.wav", b"RIFF0000WAVE", "audio/wav")},
        timeout=30,
    )
    assert Elsewhere.visits == []
    assert reply.status_code == 502, reply.text
    assert "redirect" in reply.json()["error"]["message"]
