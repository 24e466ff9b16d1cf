"""An application on a Kubernetes profile, end to end against the API emulator: deploy renders
and applies, the reconciler's watches follow the cluster from Pending to Running, to Failed
with the right reason and back; a 410 and an API server that goes away are survived; the dry
run asks the cluster; restart, stop, start, delete and discovery do what they say."""

import pytest

from jobs import deploy as verbs
from jobs.backends.kubernetes.backend import discover, forget_clients
from jobs.backends.kubernetes.errors import Gone, Unreachable
from jobs.models import Application, Event
from jobs.reconciler.watching import KINDS, ClusterFollower
from tests.fakes.kube_objects import PROD_NAMESPACE, predictor_pod, with_status
from tests.helpers import SHORTEST

NS = PROD_NAMESPACE
MANIFEST = SHORTEST.replace("profileName: local", "profileName: prod")


def ready_isvc(kube, name="bge-embed", ready=True):
    return kube.put(with_status(kube.get("InferenceService", name, NS), ready))


def pod(kube, name="bge-embed-predictor-5d8f-x7k2p", *, ready=True, oom=False):
    return kube.put(predictor_pod("bge-embed", NS, name=name, ready=ready, oom=oom))


@pytest.fixture
def follower(prod):
    follower = ClusterFollower(prod, watch_timeout=1)
    for kind in KINDS:
        follower.relist(kind)
    return follower


def settle(follower) -> None:
    """What the reconciler's threads do, in this thread: each watch marks the applications its
    events are about (a round ends after the 1 s watch timeout), then drain records them."""
    for kind in KINDS:
        follower.watch_round(kind)
    follower.drain()


def refresh(follower) -> None:
    """Observe every application again without waiting on watches (as after a relist)."""
    follower.refresh_known()
    follower.mark_all()
    follower.drain()


def test_deploy_applies_the_rendered_objects(prod, deployer, kube):
    applied = verbs.apply(MANIFEST, deployer)
    isvc = kube.get("InferenceService", "bge-embed", NS)
    assert isvc["metadata"]["labels"]["servedeck.io/application"] == "bge-embed"
    assert applied.revision.outcome == "Applied"
    assert applied.application.phase == "Pending"


def test_the_dry_run_includes_the_objects_and_the_servers_answer(prod, org, kube):
    run = verbs.dry_run(MANIFEST, org)
    assert run.ok, run.refusals
    assert [o["kind"] for o in run.objects] == ["InferenceService"]
    assert kube.get("InferenceService", "bge-embed", NS) is None  # nothing was created
    kube.fail_next(
        422, "spec.predictor: Invalid value: too many GPUs", resource="inferenceservices"
    )
    run = verbs.dry_run(MANIFEST, org)
    assert any("too many GPUs" in p.message for p in run.refusals)


def test_a_cluster_that_is_down_still_answers_the_dry_run(prod, org, kube):
    with kube.down():
        run = verbs.dry_run(MANIFEST, org)
    assert run.ok
    assert any("could not run" in p.message for p in run.warnings)


def test_pending_to_running_to_failed_and_back(prod, deployer, kube, follower):
    app = verbs.apply(MANIFEST, deployer).application
    settle(follower)
    ready_isvc(kube)
    pod(kube)
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Running", app.reason
    assert app.endpoint == f"http://bge-embed.{NS}.svc.cluster.local"
    assert (app.ready_replicas, app.desired_replicas) == (1, 1)
    assert app.served_at is not None

    ready_isvc(kube, ready=False)
    pod(kube, ready=False, oom=True)
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Failed"
    assert "out of memory" in app.reason and "resources.memory" in app.next_step
    assert Event.objects.filter(application=app, reason="Failed", kind="Warning").exists()

    ready_isvc(kube)
    pod(kube)
    settle(follower)
    app.refresh_from_db()
    assert app.phase == "Running"


def test_a_410_and_an_outage_are_survived(prod, deployer, kube, follower):
    app = verbs.apply(MANIFEST, deployer).application
    pod(kube, ready=False)  # a change the pods watch has not seen yet...
    kube.compact()  # ...and the history that held it is gone
    with pytest.raises(Gone):
        follower.watch_round("pods")
    ready_isvc(kube)
    pod(kube)
    # What follow() does on Gone: list again, which marks every application, so nothing that
    # happened while the history was lost is missed; then watch on from the list's version.
    for kind in KINDS:
        follower.relist(kind)
    follower.drain()
    app.refresh_from_db()
    assert app.phase == "Running"
    with kube.down(), pytest.raises(Unreachable):
        follower.watch_round("inference_services")


def test_restart_stop_start_and_delete(prod, deployer, kube, follower):
    app = verbs.apply(MANIFEST, deployer).application
    ready_isvc(kube)
    pod(kube)
    verbs.restart(app, deployer)
    assert kube.objects("Pod", NS) == [] or all(
        p["metadata"]["name"] != "bge-embed-predictor-5d8f-x7k2p" for p in kube.objects("Pod", NS)
    )
    assert kube.get("InferenceService", "bge-embed", NS) is not None
    verbs.stop(app, deployer)
    annotations = kube.get("InferenceService", "bge-embed", NS)["metadata"]["annotations"]
    assert annotations["serving.kserve.io/stop"] == "true"
    verbs.start(app, deployer)
    annotations = kube.get("InferenceService", "bge-embed", NS)["metadata"]["annotations"]
    assert annotations.get("serving.kserve.io/stop") != "true"
    verbs.delete(app, deployer)
    assert kube.get("InferenceService", "bge-embed", NS) is None
    assert not Application.objects.exists()


def test_rollback_applies_the_earlier_render(prod, deployer, kube):
    app = verbs.apply(MANIFEST, deployer).application
    verbs.apply(MANIFEST + "      resources:\n        memory: 6Gi\n", deployer)

    def limits():
        isvc = kube.get("InferenceService", "bge-embed", NS)
        return isvc["spec"]["predictor"]["model"]["resources"]["limits"]

    assert limits()["memory"] == "6Gi"
    verbs.rollback(app, 1, deployer)
    assert limits()["memory"] == "5Gi"  # revision 1's: what holds bge-m3 on CPU


def test_forbidden_is_refused_at_the_dry_run_with_the_rbac_rule(prod, deployer, kube):
    kube.fail_next(403, verb="patch", resource="inferenceservices")
    with pytest.raises(verbs.Refused) as refused:
        verbs.apply(MANIFEST, deployer)
    (problem,) = refused.value.dry_run.refusals
    assert "may not patch inferenceservices" in problem.message
    assert "Grant" in problem.message and "Role" in problem.message
    assert not Application.objects.exists()


def test_delete_when_the_cluster_is_down_keeps_the_application(prod, deployer, kube):
    app = verbs.apply(MANIFEST, deployer).application
    with kube.down(), pytest.raises(verbs.ActionError, match="cluster prod is unavailable"):
        verbs.delete(app, deployer)
    assert Application.objects.filter(pk=app.pk).exists()


def test_discovery_reads_the_add_ons(prod, kube):
    discover(prod)
    prod.refresh_from_db()
    assert "kserve" in prod.addons and "keda" in prod.addons
    kube.uninstall("keda")
    forget_clients()
    discover(prod)
    prod.refresh_from_db()
    assert "keda" not in prod.addons


def test_discover_from_the_page_and_the_command(prod, as_admin, admin, kube):
    from io import StringIO

    from django.core.management import call_command
    from django.urls import reverse

    response = as_admin.post(reverse("jobs:cluster-discover", args=["prod"]), follow=True)
    assert "add-ons" in response.content.decode() and "kserve" in response.content.decode()
    out = StringIO()
    call_command("cluster", "discover", "prod", stdout=out)
    assert out.getvalue().startswith("cluster/prod: add-ons")
    with kube.down():
        forget_clients()
        response = as_admin.post(reverse("jobs:cluster-discover", args=["prod"]), follow=True)
    assert "cannot reach" in response.content.decode().lower()


@pytest.mark.database_file  # the reconciler's threads write beside this one
def test_the_reconciler_follows_the_cluster_in_its_threads(prod, deployer, kube, transactional_db):
    import threading
    import time

    from jobs.reconciler import Reconciler

    app = verbs.apply(MANIFEST, deployer).application
    reconciler = Reconciler(interval=0.2)
    thread = threading.Thread(target=reconciler.run)
    thread.start()
    try:
        time.sleep(0.5)
        ready_isvc(kube)
        pod(kube)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            app.refresh_from_db()
            if app.phase == "Running":
                break
            time.sleep(0.1)
        assert app.phase == "Running", app.reason
    finally:
        reconciler.stop()
        thread.join(10)
    assert not thread.is_alive()
