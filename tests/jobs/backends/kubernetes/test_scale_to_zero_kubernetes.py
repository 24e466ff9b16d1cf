"""Scale to zero on a Kubernetes profile, against the API emulator: an idle model with
minReplicas 0 has its predictor scaled to zero (the InferenceService re-applied with
minReplicas 0 and autoscalerClass none, valid against KServe's CRD) and reads Sleeping; the
first request's wake applies it awake again, and it reads Running only once the predictor's
ready endpoints appear in its EndpointSlices."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import deploy as verbs
from jobs.models import Application, Phase, Wake
from jobs.reconciler import sleeping
from jobs.reconciler.reconciler import Reconciler
from jobs.reconciler.watching import KINDS, ClusterFollower
from jobs.render import render_for_profile, validate
from tests.fakes.kube_objects import PROD_NAMESPACE, endpoint_slice, predictor_pod, with_status
from tests.helpers import SHORTEST
from tests.jobs.backends.kubernetes.follower_support import namespaced_follower, settle

NS = PROD_NAMESPACE
SLEEPY = SHORTEST.replace("profileName: local", "profileName: prod") + (
    "      scaling:\n        minReplicas: 0\n        scaleToZeroAfter: 5m\n"
)
POD = "bge-embed-predictor-5d8f-x7k2p"
SERVICE = "bge-embed-predictor"


@pytest.fixture
def follower(prod, kube):
    return namespaced_follower(prod, kube, NS)


def predictor(kube) -> dict:
    return kube.get("InferenceService", "bge-embed", NS)


def serving(kube, follower, app) -> Application:
    """What KServe and Kubernetes do once a replica is up: the InferenceService is ready, the
    pod runs, its address is in the predictor Service's EndpointSlice."""
    kube.put(with_status(predictor(kube), True))
    kube.put(predictor_pod("bge-embed", NS, name=POD))
    kube.put(endpoint_slice(SERVICE, NS, "10.2.0.4"))
    settle(follower)
    app.refresh_from_db()
    return app


def idle(app, minutes: int) -> None:
    long_ago = timezone.now() - timedelta(minutes=minutes)
    Application.objects.filter(pk=app.pk).update(last_request_at=long_ago, updated_at=long_ago)


def test_an_idle_model_is_scaled_to_zero_and_woken_by_its_first_request(
    prod, deployer, kube, follower
):
    app = verbs.apply(SLEEPY, deployer).application
    awake = predictor(kube)
    assert awake["spec"]["predictor"]["minReplicas"] == 1  # one replica while awake
    assert awake["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"
    app = serving(kube, follower, app)
    assert app.phase == Phase.RUNNING, app.reason
    assert app.replica_endpoints == ["http://10.2.0.4:8080"]

    # Not idle long enough: nothing happens.
    idle(app, 4)
    reconciler = Reconciler()
    assert reconciler.sleep_kubernetes() == []
    assert predictor(kube)["spec"]["predictor"]["minReplicas"] == 1

    idle(app, 6)
    assert [a.pk for a in reconciler.sleep_kubernetes()] == [app.pk]
    asleep = predictor(kube)
    assert asleep["spec"]["predictor"]["minReplicas"] == 0
    annotations = asleep["metadata"]["annotations"]
    assert annotations["serving.kserve.io/autoscalerClass"] == "none"
    assert annotations["servedeck.io/sleeping"] == "true"
    assert "autoScaling" not in asleep["spec"]["predictor"]
    app.refresh_from_db()
    assert app.phase == Phase.SLEEPING and app.replica_endpoints == []

    # What KServe's Deployment at zero replicas leaves: no pod, an empty slice.
    kube.emit("DELETED", kube.get("Pod", POD, NS))
    kube.put(endpoint_slice(SERVICE, NS))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.SLEEPING, app.reason
    assert "scaled to zero" in app.reason and app.replica_endpoints == []

    # The first request wakes it, exactly once.
    assert sleeping.wake(app.pk) is True
    assert sleeping.wake(app.pk) is False
    woken = predictor(kube)
    assert woken["spec"]["predictor"]["minReplicas"] == 1
    assert "servedeck.io/sleeping" not in woken["metadata"]["annotations"]
    assert woken["metadata"]["annotations"]["servedeck.io/revision"] == "1"
    app.refresh_from_db()
    assert app.phase == Phase.PENDING and app.wake_requested_at is not None

    # The predictor is ready before its endpoints are published: not Running yet.
    kube.put(with_status(predictor(kube), True))
    kube.put(predictor_pod("bge-embed", NS, name=POD))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.LOADING, app.reason
    assert "EndpointSlices" in app.reason
    assert Wake.objects.get(application=app).ready_at is None

    # The endpoints appear: Running, the replica known to the gateway, the wake timed.
    kube.put(endpoint_slice(SERVICE, NS, "10.2.0.9"))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING, app.reason
    assert app.replica_endpoints == ["http://10.2.0.9:8080"]
    assert Wake.objects.get(application=app).ready_at is not None


def test_the_predictor_scaled_to_zero_is_valid_for_kserve(prod, deployer, kube):
    app = verbs.apply(SLEEPY, deployer).application
    profile = app.profile
    asleep = render_for_profile(app.manifest, profile, asleep=True)
    assert validate(asleep) == []
    isvc = next(o for o in asleep if o["kind"] == "InferenceService")
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    assert validate(render_for_profile(app.manifest, profile)) == []


def test_a_model_that_must_stay_up_is_never_put_to_sleep(prod, deployer, kube, follower):
    manifest = SHORTEST.replace("profileName: local", "profileName: prod")
    app = serving(kube, follower, verbs.apply(manifest, deployer).application)
    assert app.phase == Phase.RUNNING, app.reason
    idle(app, 60 * 24)
    assert Reconciler().sleep_kubernetes() == []
    assert predictor(kube)["spec"]["predictor"]["minReplicas"] == 1
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING


def test_start_on_a_sleeping_model_wakes_it(prod, deployer, kube, follower):
    app = serving(kube, follower, verbs.apply(SLEEPY, deployer).application)
    idle(app, 6)
    Reconciler().sleep_kubernetes()
    app.refresh_from_db()
    assert app.phase == Phase.SLEEPING
    verbs.start(app, deployer)
    assert predictor(kube)["spec"]["predictor"]["minReplicas"] == 1
    app.refresh_from_db()
    assert app.phase == Phase.PENDING


def test_the_dry_run_explains_scale_to_zero_on_the_cluster(prod, org, kube):
    run = verbs.dry_run(SLEEPY, org)
    assert run.ok, run.refusals
    assert "Deployment to zero replicas" in run.sleeping
    assert "KServe 0.15.1 or later" in run.sleeping
    isvc = next(o for o in run.objects if o["kind"] == "InferenceService")
    assert isvc["spec"]["predictor"]["minReplicas"] == 1  # what Deploy applies: awake


def test_without_the_endpointslices_watch_a_woken_model_runs_by_its_pods(prod, deployer, kube):
    """A cluster whose Role lacks endpointslices (the watch is refused and shown on the
    Clusters page): a model that sleeps is not held at Loading for endpoints it cannot see."""
    everything_but_slices = [
        {"apiGroups": ["", "serving.kserve.io"], "resources": ["*"], "verbs": ["*"]}
    ]
    kube.rbac(roles={NS: everything_but_slices})
    follower = ClusterFollower(prod, watch_timeout=1)
    for kind in KINDS:
        try:
            follower.relist(kind)
        except Exception:  # the refused list: what follow() records as the stream's error
            follower.errors[(kind, NS)] = "refused"
    assert not follower.sees_endpoints(NS)
    app = verbs.apply(SLEEPY, deployer).application
    kube.put(with_status(predictor(kube), True))
    kube.put(predictor_pod("bge-embed", NS, name=POD))
    for kind in ("inference_services", "pods", "events"):
        follower.watch_round(kind)
    follower.drain()
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING, app.reason
