"""Low item: a token sent in a query string was written to daphne's access log. The console
refuses credentials in query strings, and its server (console.serve) logs no query values."""

import socket
import subprocess
import sys
import time

import httpx
import pytest
from django.conf import settings

from console.serve import redact_path
from tests.helpers import api_error, bearer


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/applications?token=sdp_abc",
        "/api/v1/applications?access_token=x",
        "/api/v1/applications?Api_Key=x",
        "/api/v1/applications?q=sdp_abcdef",
        "/?password=hunter2",
    ],
)
def test_credentials_in_the_query_string_are_refused(as_viewer, viewer, url):
    response = as_viewer.get(url, headers={"Authorization": bearer(viewer)["HTTP_AUTHORIZATION"]})
    assert response.status_code == 400
    text = response.content.decode()
    assert "Authorization: Bearer" in text and "revoke it" in text
    assert "sdp_abc" not in text and "hunter2" not in text


def test_the_api_refusal_is_json(client, db):
    response = client.get("/api/v1/applications?token=sdp_abc")
    assert response.status_code == 400
    assert "credential" in api_error(response)["message"]


def test_ordinary_parameters_pass(as_viewer):
    assert as_viewer.get("/", {"page": "1", "sort": "name"}).status_code == 200


@pytest.mark.parametrize(
    "path, logged",
    [
        ("/healthz", "/healthz"),
        ("/api/v1/x?token=sdp_secret&page=2", "/api/v1/x?token=…&page=…"),
        ("/a?=bare", "/a?=…"),
        ("/a?", "/a?…"),
        ("/a?%0d%0aforged=1", "/a?%0D%0Aforged=…"),
    ],
)
def test_the_access_log_path_has_no_query_values(path, logged):
    assert redact_path(path) == logged


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_server_through_console_serve_logs_no_token(tmp_path):
    port = free_port()
    env = {"SERVEDECK_VAR_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "console.serve",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "console.asgi:application",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/healthz?token=sdp_topsecret", trust_env=False
                )
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:  # a wait with a limit, not a timing
                    pytest.fail("the console did not start")
                assert server.poll() is None, server.stdout.read().decode()
                time.sleep(0.2)
        assert answer.status_code == 200
    finally:
        server.terminate()
        output = server.communicate(timeout=20)[0].decode()
    assert '"GET /healthz?token=… HTTP/1.1" 200' in output  # the access log line is there ...
    assert "sdp_topsecret" not in output  # ... without the token
