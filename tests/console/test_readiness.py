"""The probes' routes: /healthz says the process answers, /readyz that it can serve (the
database answers, and Redis where REDIS_URL is set); both before host checks and the HTTPS
redirect, since kubelets probe a pod's address over plain HTTP."""

from __future__ import annotations

import shutil
import socket
import subprocess
from unittest import mock

import pytest
import redis
from django.db import OperationalError, connections

from tests.helpers import wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def probe(client, settings):
    """A probe as a kubelet sends it: a pod address the console does not know as a host, over
    plain HTTP to a console that redirects browsers to HTTPS."""
    settings.ALLOWED_HOSTS = ["servedeck.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.REDIS_URL = ""
    return lambda path: client.get(path, HTTP_HOST="10.1.2.3:8000")


def test_healthz_answers_whatever_the_host(probe):
    answer = probe("/healthz")
    assert (answer.status_code, answer.content) == (200, b"ok")


def test_readyz_is_ready_when_the_database_answers(probe, db):
    answer = probe("/readyz")
    assert (answer.status_code, answer.content) == (200, b"ready")


def test_readyz_is_not_ready_when_the_database_does_not_answer(probe, db):
    refused = OperationalError("connection refused")
    with mock.patch.object(connections["default"], "cursor", side_effect=refused):
        answer = probe("/readyz")
    assert answer.status_code == 503
    assert answer.content == b"the database does not answer (OperationalError)"
    assert b"refused" not in answer.content  # what the driver said stays in the log


def test_readyz_is_not_ready_when_redis_does_not_answer(probe, db, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    answer = probe("/readyz")
    assert answer.status_code == 503
    assert answer.content == b"Redis does not answer (ConnectionError)"


def test_readyz_names_both_when_neither_answers(probe, db, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    with mock.patch.object(connections["default"], "cursor", side_effect=OperationalError()):
        answer = probe("/readyz")
    assert answer.status_code == 503
    assert answer.content.decode().split("; ") == [
        "the database does not answer (OperationalError)",
        "Redis does not answer (ConnectionError)",
    ]


@pytest.fixture
def redis_server(tmp_path):
    """A Redis of this test's own on a free port (Debian's redis-server)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    try:
        wait_for(answers, "redis-server did not start")
        yield url
    finally:
        server.terminate()
        server.wait(10)


def test_readyz_is_ready_when_redis_answers(probe, db, settings, redis_server):
    settings.REDIS_URL = redis_server
    answer = probe("/readyz")
    assert (answer.status_code, answer.content) == (200, b"ready")
