"""A replica reads Running once it answered one real request of its model's task, and a server
still loading is sent that request once, however often the status is probed meanwhile."""

from __future__ import annotations

import httpx

from jobs.backends.local import replica_status
from jobs.backends.local.replica_status import warmed
from jobs.backends.local.state import AppState, Replica
from tests.gateway.support import StandIn


def chats_seen(server: StandIn) -> int:
    return len(httpx.get(server.url + "/fake/requests", timeout=5).json()["requests"])


def replica_of(server: StandIn) -> Replica:
    return Replica(0, server.port, server.process.pid, None, "", [])


def in_flight(replica: Replica):
    return replica_status._warming.get((replica.pid, replica.port))


def test_a_loading_server_is_sent_one_warm_up_request_however_often_it_is_probed():
    server = StandIn("chat", "--answer-delay", "3")  # a model loading on its first request
    try:
        state = AppState("chat", 1, {}, "", runtime="transformers", model_id="chat")
        replica = replica_of(server)
        answers = [warmed(server.url, state, replica) for _ in range(50)]
        assert answers == [False] * 50  # in flight: a probe never waits for it
        assert in_flight(replica).result(timeout=60) is True  # answered
        assert warmed(server.url, state, replica) is True
        assert chats_seen(server) == 1
    finally:
        server.stop()


def test_a_failed_warm_up_is_sent_again_at_the_next_probe():
    server = StandIn("chat")
    # A model id the server does not serve: its answer is a 404.
    state = AppState("chat", 1, {}, "", runtime="transformers", model_id="not-served")
    replica = replica_of(server)
    try:
        assert warmed(server.url, state, replica) is False  # sent
        assert in_flight(replica).result(timeout=60) is False  # refused
        assert warmed(server.url, state, replica) is False  # read: not Running
        assert in_flight(replica) is None
        assert warmed(server.url, state, replica) is False  # sent again
        assert in_flight(replica) is not None
    finally:
        server.stop()
