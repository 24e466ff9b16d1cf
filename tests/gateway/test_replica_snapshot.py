"""The gateway's snapshot knows every ready replica of every application: the local backend's
ports, the Kubernetes predictor's ready endpoints from its EndpointSlices (watched by the
reconciler), saved on the Application and reloaded with keys and routes."""

import pytest

from jobs import deploy as verbs
from jobs.backends.base import Observed
from jobs.backends.local.state import AppState, Replica, derive_status
from jobs.gateway.snapshot import load_snapshot
from jobs.lifecycle import record_status
from jobs.models import Application, Phase
from jobs.reconciler.watching import KINDS, ClusterFollower
from jobs.status.endpoints import application_of_slice, ready_endpoints
from tests.fakes.kube import kube_emulator_fixture, kube_fixture  # noqa: F401
from tests.fakes.kube_objects import (
    PROD_NAMESPACE,
    predictor_pod,
    prod_fixture,  # noqa: F401
    with_status,
)
from tests.gateway.support import make_app
from tests.helpers import SHORTEST

NS = PROD_NAMESPACE


def endpoint_slice(app: str, name: str, *addresses: tuple[str, bool | None], port=8080) -> dict:
    endpoints = []
    for address, ready in addresses:
        conditions = {} if ready is None else {"ready": ready}
        endpoints.append({"addresses": [address], "conditions": conditions})
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": f"{app}-predictor"},
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


# --- the pure readers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        ([], ()),
        ([endpoint_slice("a", "s1", ("10.0.0.2", True))], ("http://10.0.0.2:8080",)),
        # ready absent counts as ready; not ready is left out; sorted, without duplicates
        (
            [
                endpoint_slice("a", "s1", ("10.0.0.9", None), ("10.0.0.3", False)),
                endpoint_slice("a", "s2", ("10.0.0.1", True), ("10.0.0.9", True)),
            ],
            ("http://10.0.0.1:8080", "http://10.0.0.9:8080"),
        ),
        # a slice without ports says no address to send to
        ([{**endpoint_slice("a", "s1", ("10.0.0.2", True)), "ports": []}], ()),
        (
            [{**endpoint_slice("a", "s1", ("fd00::2", True)), "addressType": "IPv6"}],
            ("http://[fd00::2]:8080",),
        ),
    ],
)
def test_ready_endpoints(slices, expected):
    assert ready_endpoints(slices) == expected


def test_terminating_endpoints_are_left_out():
    s = endpoint_slice("a", "s1", ("10.0.0.2", True))
    s["endpoints"][0]["conditions"]["terminating"] = True
    assert ready_endpoints([s]) == ()


@pytest.mark.parametrize(
    ("service", "app"),
    [("llama-predictor", "llama"), ("llama", None), ("-predictor", None), (None, None)],
)
def test_the_application_of_a_slice(service, app):
    labels = {"kubernetes.io/service-name": service} if service else {}
    assert application_of_slice({"metadata": {"labels": labels}}) == app


# --- local: every ready replica's port ----------------------------------------------------------


def _replica(index: int, port: int) -> Replica:
    return Replica(index, port, 100 + index, None, "2025-01-01T00:00:00+00:00", ["serve"])


def test_the_local_status_lists_every_ready_replica():
    manifest = {"spec": {"source": {"model": {"scaling": {"minReplicas": 3}}}}}
    state = AppState("chat", 1, manifest, "", replicas=[_replica(i, 9100 + i) for i in range(3)])
    status = derive_status(state, {0: True, 1: False, 2: True}, [])
    assert status.replica_endpoints == ("http://127.0.0.1:9100", "http://127.0.0.1:9102")
    assert status.endpoint == "http://127.0.0.1:9100"
    assert Observed.of(status).replica_endpoints == status.replica_endpoints
    state.stopped = "request"
    assert derive_status(state, {0: True}, []).replica_endpoints == ()


def test_recorded_replicas_reach_the_snapshot(org):
    app = make_app(org, "chat", "http://127.0.0.1:9100")
    assert load_snapshot().routes[(org.pk, "chat")].replicas == ("http://127.0.0.1:9100",)
    ports = ("http://127.0.0.1:9102", "http://127.0.0.1:9100")
    observed = Observed(Phase.RUNNING, endpoint=ports[1], ready_replicas=2, replica_endpoints=ports)
    assert record_status(app, observed)
    app.refresh_from_db()
    assert app.replica_endpoints == list(ports)
    route = load_snapshot().routes[(org.pk, "chat")]
    assert route.replicas == ("http://127.0.0.1:9100", "http://127.0.0.1:9102")  # sorted
    assert route.upstream == "http://127.0.0.1:9100"
    # An observer that does not see replicas (None) keeps what was saved.
    assert not record_status(app, Observed(Phase.RUNNING, endpoint=ports[1], ready_replicas=2))
    assert Application.objects.get(pk=app.pk).replica_endpoints == list(ports)


def test_a_change_of_replicas_moves_the_change_counter(org):
    from accesspolicies.models import ChangeCounter

    app = make_app(org, "chat", "http://127.0.0.1:9100")
    before = ChangeCounter.read()
    record_status(
        app,
        Observed(
            Phase.RUNNING,
            endpoint="http://127.0.0.1:9100",
            replica_endpoints=("http://127.0.0.1:9100", "http://127.0.0.1:9101"),
        ),
    )
    assert ChangeCounter.read() != before


# --- Kubernetes: the predictor's ready endpoints from EndpointSlices ------------------------------


def settle(follower) -> None:
    for kind in KINDS:
        follower.watch_round(kind)
    follower.drain()


def test_endpoint_slices_are_watched_in_the_profiles_namespaces(prod, deployer, kube):
    manifest = SHORTEST.replace("profileName: local", "profileName: prod")
    app = verbs.apply(manifest, deployer).application
    kube.namespaced_rbac(NS)  # the Role the docs list, endpointslices included
    follower = ClusterFollower(prod, watch_timeout=1)
    for kind in KINDS:
        follower.relist(kind)
    follower.drain()
    kube.put(with_status(kube.get("InferenceService", "bge-embed", NS), True))
    kube.put(predictor_pod("bge-embed", NS))
    kube.put(endpoint_slice("bge-embed", "bge-embed-predictor-a1", ("10.1.0.7", True)))
    kube.put(endpoint_slice("other", "other-predictor-a1", ("10.1.0.99", True)))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING, app.reason
    assert app.replica_endpoints == ["http://10.1.0.7:8080"]
    # A second replica becomes ready: the watch tells, the snapshot has both.
    kube.put(
        endpoint_slice(
            "bge-embed", "bge-embed-predictor-a1", ("10.1.0.7", True), ("10.1.0.8", True)
        )
    )
    settle(follower)
    app.refresh_from_db()
    assert app.replica_endpoints == ["http://10.1.0.7:8080", "http://10.1.0.8:8080"]
    route = load_snapshot().routes[(app.organization_id, "bge-embed")]
    engine = app.serving_runtime
    suffix = "/openai" if engine == "vllm" else ""
    assert route.replicas == ("http://10.1.0.7:8080" + suffix, "http://10.1.0.8:8080" + suffix)
    # A verb's own observation (no slices) keeps what the watch saw.
    backend_status = Observed(app.phase, endpoint=app.endpoint, ready_replicas=2)
    record_status(app, backend_status)
    assert Application.objects.get(pk=app.pk).replica_endpoints == app.replica_endpoints
    # The slice goes (the predictor scaled away): no replica left.
    kube.emit("DELETED", kube.get("EndpointSlice", "bge-embed-predictor-a1", NS))
    settle(follower)
    app.refresh_from_db()
    assert app.replica_endpoints == []
