"""Scale to zero on a Kubernetes profile through the gateway, against the API emulator: the
model's predictor is scaled to zero; concurrent requests to it wake it exactly once (the wake
applies the InferenceService back at one replica), are held while it comes up, and are all
answered once the predictor's ready endpoint appears in its EndpointSlice (the test writes it,
as Kubernetes would, pointing at a replica served here)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.db import OperationalError
from django.utils import timezone

from jobs import deploy as verbs
from jobs.models import Application, Phase, Wake
from jobs.reconciler.reconciler import Reconciler
from jobs.reconciler.watching import KINDS, ClusterFollower
from tests.fakes.kube import kube_emulator_fixture, kube_fixture  # noqa: F401
from tests.fakes.kube_objects import (
    PROD_NAMESPACE,
    predictor_pod,
    prod_fixture,  # noqa: F401
    with_status,
)
from tests.gateway.support import caught_up, make_key
from tests.helpers import SHORTEST, wait_for

NS = PROD_NAMESPACE
SLEEPY = SHORTEST.replace("profileName: local", "profileName: prod") + (
    "      scaling:\n        minReplicas: 0\n        scaleToZeroAfter: 1m\n"
)
CALLS = 12


class Replica(BaseHTTPRequestHandler):
    """The predictor's one replica: an OpenAI embeddings answer wherever KServe's server has
    it (under /openai for vLLM); the paths asked are kept."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.paths.append(self.path)
        body = json.dumps(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 0.5]}],
                "model": "bge-embed",
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_) -> None:
        pass


@pytest.fixture
def replica():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replica)
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def endpoint_slice(*addresses: str, port: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "bge-embed-predictor-x1",
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": "bge-embed-predictor"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


def settle(follower) -> None:
    """The watches' round and the drain, retried while the gateway's threads hold SQLite's
    in-memory tables."""

    def once() -> bool:
        try:
            for kind in KINDS:
                follower.watch_round(kind)
            follower.drain()
            return True
        except OperationalError:
            follower.mark_all()
            return False

    wait_for(once, "the watches could not record", timeout=30, every=0.1)


def phase_of(app: Application) -> str:
    app.refresh_from_db()
    return app.phase


def test_held_requests_wake_a_sleeping_predictor_once_and_are_answered(
    prod, deployer, kube, gateway, replica
):
    kube.namespaced_rbac(NS)
    app = verbs.apply(SLEEPY, deployer).application
    follower = ClusterFollower(prod, watch_timeout=1)
    for kind in KINDS:
        follower.relist(kind)
    port = replica.server_address[1]
    pod = predictor_pod("bge-embed", NS)
    kube.put(with_status(kube.get("InferenceService", "bge-embed", NS), True))
    kube.put(pod)
    kube.put(endpoint_slice("127.0.0.1", port=port))
    settle(follower)
    assert phase_of(app) == Phase.RUNNING, app.reason

    # Idle past scaleToZeroAfter: scaled to zero; the pod and its endpoint go.
    long_ago = timezone.now() - timedelta(minutes=2)
    Application.objects.filter(pk=app.pk).update(last_request_at=long_ago, updated_at=long_ago)
    assert [a.pk for a in Reconciler().sleep_kubernetes()] == [app.pk]
    assert kube.get("InferenceService", "bge-embed", NS)["spec"]["predictor"]["minReplicas"] == 0
    kube.emit("DELETED", kube.get("Pod", pod["metadata"]["name"], NS))
    kube.put(endpoint_slice(port=port))
    settle(follower)
    assert phase_of(app) == Phase.SLEEPING, app.reason
    caught_up(gateway)
    _, plain = make_key(app.organization)

    def ask() -> httpx.Response:
        return httpx.post(
            gateway.url + "/v1/embeddings",
            headers={"Authorization": f"Bearer {plain}"},
            json={"model": "bge-embed", "input": "hello"},
            timeout=60,
        )

    with ThreadPoolExecutor(CALLS) as pool:
        futures = [pool.submit(ask) for _ in range(CALLS)]
        # The first request's wake applies the predictor back at one replica.
        wait_for(lambda: gateway.gateway.waker.wake_calls_done > 0, "no wake was asked", timeout=30)
        woken = kube.get("InferenceService", "bge-embed", NS)
        assert woken["spec"]["predictor"]["minReplicas"] == 1
        assert not any(f.done() for f in futures)  # held: no replica is ready yet
        # What KServe and Kubernetes do next: a ready pod, its address in the slice.
        kube.put(with_status(woken, True))
        kube.put(pod)
        kube.put(endpoint_slice("127.0.0.1", port=port))
        settle(follower)
        answers = [f.result(timeout=60) for f in futures]

    assert [a.status_code for a in answers] == [200] * CALLS, [a.text[:200] for a in answers]
    assert all(a.json()["data"][0]["embedding"] == [0.25, 0.5] for a in answers)
    assert len(replica.paths) == CALLS
    assert Wake.objects.filter(application=app).count() == 1
    wake = Wake.objects.get(application=app)
    assert wake.ready_at is not None and wake.ready_at >= wake.requested_at
    assert phase_of(app) == Phase.RUNNING
