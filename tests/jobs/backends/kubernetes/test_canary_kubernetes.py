"""Canary rollouts on a Kubernetes profile, against the API emulator: the canary is a second
InferenceService `<name>-canary` (valid against KServe's CRDs) beside the stable one, which its
apply does not prune; the stable revision's status, replicas and events leave the canary out;
the gateway's split reads the canary's ready endpoints; abort deletes the canary, and promote
applies its revision as the stable InferenceService before the canary is deleted."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import deploy as verbs
from jobs.backends import backend_for
from jobs.gateway.snapshot import load_snapshot
from jobs.kube_names import CANARY_TRACK, TRACK_LABEL
from jobs.models import Phase, Rollout
from jobs.render import APP_LABEL, REVISION_ANNOTATION, render_canary_for_profile, validate
from jobs.render.common import ORGANIZATION_LABEL
from jobs.rollouts import steps as rollouts
from tests.fakes.kube_objects import PROD_NAMESPACE, endpoint_slice, predictor_pod, with_status
from tests.helpers import SHORTEST
from tests.jobs.backends.kubernetes.follower_support import namespaced_follower, settle

NS = PROD_NAMESPACE
APP = "bge-embed"
CANARY = "bge-embed-canary"
STABLE = SHORTEST.replace("profileName: local", "profileName: prod")
WITH_CANARY = STABLE.replace(
    "spec:\n",
    "spec:\n  rollout:\n    strategy: Canary\n    steps: [10, 50]\n    stepDuration: 1m\n",
)


def canary_pod() -> dict:
    pod = predictor_pod(APP, NS, name=f"{CANARY}-predictor-7c9d-q2w3e")
    pod["metadata"]["labels"][TRACK_LABEL] = CANARY_TRACK
    pod["metadata"]["labels"]["serving.kserve.io/inferenceservice"] = CANARY
    return pod


@pytest.fixture
def follower(prod, kube):
    return namespaced_follower(prod, kube, NS)


@pytest.fixture
def serving(prod, kube, deployer, follower):
    """Revision 1 Running on the emulator, one replica at 10.2.0.4."""
    app = verbs.apply(STABLE, deployer).application
    kube.put(with_status(kube.get("InferenceService", APP, NS), True))
    kube.put(predictor_pod(APP, NS))
    kube.put(endpoint_slice(f"{APP}-predictor", NS, "10.2.0.4"))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING, app.reason
    return app


def canary_serves(kube, follower) -> None:
    """What KServe and Kubernetes do once the canary's replica is up."""
    kube.put(with_status(kube.get("InferenceService", CANARY, NS), True))
    kube.put(canary_pod())
    kube.put(endpoint_slice(f"{CANARY}-predictor", NS, "10.2.0.9"))
    settle(follower)


def started(app, deployer, kube, follower) -> Rollout:
    """Revision 2 (Canary) applied beside revision 1, serving, at its first step."""
    revision = verbs.apply(WITH_CANARY, deployer).revision
    assert revision.number == 2 and revision.outcome == "Applied", revision.message
    rollout = Rollout.objects.get(application=app)
    assert rollout.state == Rollout.State.STARTING
    canary_serves(kube, follower)
    rollouts.advance_all(timezone.now())
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.PROGRESSING, rollout.canary_reason
    return rollout


def test_the_canary_renders_as_a_second_inference_service_valid_against_the_crds(prod, deployer):
    filled = verbs.apply(WITH_CANARY, deployer).revision.manifest  # nothing runs: replaced
    objects = render_canary_for_profile(filled, prod.profiles.get(), revision=2)
    assert validate(objects) == []
    (isvc,) = [o for o in objects if o["kind"] == "InferenceService"]
    meta = isvc["metadata"]
    assert meta["name"] == CANARY and meta["namespace"] == NS
    assert meta["labels"][APP_LABEL] == APP and meta["labels"][TRACK_LABEL] == CANARY_TRACK
    assert meta["annotations"][REVISION_ANNOTATION] == "2"
    # Served under the application's model name, which the gateway sends either revision.
    assert isvc["spec"]["predictor"]["model"]["args"][-1] == f"--model_name={APP}"


def test_a_canary_runs_beside_the_stable_revision_which_keeps_its_status(
    serving, deployer, kube, follower
):
    app = serving
    revision = verbs.apply(WITH_CANARY, deployer).revision
    assert revision.outcome == "Applied", revision.message
    stable, canary = kube.get("InferenceService", APP, NS), kube.get("InferenceService", CANARY, NS)
    assert stable is not None, "the canary's apply pruned the stable InferenceService"
    assert stable["metadata"]["annotations"][REVISION_ANNOTATION] == "1"
    assert canary["metadata"]["annotations"][REVISION_ANNOTATION] == "2"
    assert canary["metadata"]["labels"][ORGANIZATION_LABEL] == app.organization.slug

    # Its replica comes up: the stable revision's status counts only its own.
    canary_serves(kube, follower)
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING and app.ready_replicas == 1
    assert app.replica_endpoints == ["http://10.2.0.4:8080"]

    rollouts.advance_all(timezone.now())
    rollout = Rollout.objects.get(application=app)
    assert rollout.state == Rollout.State.PROGRESSING and rollout.weight == 10
    assert rollout.canary_phase == Phase.RUNNING
    assert rollout.canary_endpoints == ["http://10.2.0.9:8080"]
    # The gateway's split: the stable replica, and the canary's under KServe's /openai prefix.
    route = load_snapshot().routes[(app.organization_id, APP)]
    assert route.replicas == ("http://10.2.0.4:8080/openai",)
    assert route.canary.replicas == ("http://10.2.0.9:8080/openai",)
    assert (route.canary.stable_revision, route.canary.revision) == (1, 2)


def test_abort_deletes_the_canary_and_keeps_the_stable_revision(serving, deployer, kube, follower):
    app = serving
    started(app, deployer, kube, follower)
    now = timezone.now()
    rollouts.abort(app, deployer.user, now=now)
    rollouts.advance_all(now + timedelta(seconds=rollouts.DRAIN_SECONDS + 1))
    assert kube.get("InferenceService", CANARY, NS) is None
    stable = kube.get("InferenceService", APP, NS)
    assert stable["metadata"]["annotations"][REVISION_ANNOTATION] == "1"
    rollout = Rollout.objects.get(application=app)
    assert rollout.state == Rollout.State.ABORTED and rollout.canary_removed
    app.refresh_from_db()
    assert "rollout" not in app.manifest["spec"]  # revision 1's manifest again


def test_promote_makes_the_canarys_revision_the_stable_one_then_deletes_the_canary(
    serving, deployer, kube, follower
):
    app = serving
    started(app, deployer, kube, follower)
    now = timezone.now()
    rollouts.promote(app, deployer.user, now=now)
    later = now + timedelta(seconds=rollouts.DRAIN_SECONDS + 1)
    rollouts.advance_all(later)  # the stable InferenceService takes revision 2
    stable = kube.get("InferenceService", APP, NS)
    assert stable["metadata"]["annotations"][REVISION_ANNOTATION] == "2"
    assert TRACK_LABEL not in stable["metadata"]["labels"]
    assert kube.get("InferenceService", CANARY, NS) is not None  # serving until the end

    kube.put(with_status(stable, True))  # KServe rolled the stable predictor to revision 2
    settle(follower)
    rollouts.advance_all(later)
    rollout = Rollout.objects.get(application=app)
    assert rollout.state == Rollout.State.PROMOTED
    rollouts.advance_all(later + timedelta(seconds=rollouts.DRAIN_SECONDS + 1))
    assert kube.get("InferenceService", CANARY, NS) is None
    assert kube.get("InferenceService", APP, NS) is not None
    assert Rollout.objects.get(application=app).canary_removed


def event(name: str, about_kind: str, about: str, reason: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": about_kind, "name": about, "namespace": NS},
        "reason": reason,
        "message": f"{reason} for {about}",
        "type": "Normal",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }


def test_restart_events_and_logs_of_the_stable_revision_leave_the_canary_out(
    serving, deployer, kube, follower, prod
):
    app = serving
    started(app, deployer, kube, follower)
    kube.put(event("e1", "InferenceService", APP, "StableSaid"))
    kube.put(event("e2", "InferenceService", CANARY, "CanarySaid"))
    kube.put(event("e3", "Pod", f"{CANARY}-predictor-7c9d-q2w3e", "CanaryPodSaid"))
    client = backend_for(prod.profiles.get()).client
    org = app.organization.slug
    stable = client.observe(APP, NS, organization=org)
    assert [e["reason"] for e in stable.events] == ["StableSaid"]
    assert [p["metadata"]["name"] for p in stable.pods] == [f"{APP}-predictor-5d8f-x7k2p"]
    canary = client.observe(APP, NS, organization=org, track=CANARY_TRACK)
    assert canary.isvc["metadata"]["name"] == CANARY
    assert sorted(e["reason"] for e in canary.events) == ["CanaryPodSaid", "CanarySaid"]
    # The watches' copy, which the stable revision's status is derived from, leaves them out too.
    settle(follower)
    _, pods, events = follower.objects_of(NS, APP, org)
    assert [e["reason"] for e in events] == ["StableSaid"] and len(pods) == 1

    assert [p["metadata"]["name"] for p in client.replica_pods(APP, NS, organization=org)] == [
        f"{APP}-predictor-5d8f-x7k2p"
    ]
    assert client.restart(APP, NS, organization=org) == 1  # the stable replica only
    assert kube.get("Pod", f"{CANARY}-predictor-7c9d-q2w3e", NS) is not None
