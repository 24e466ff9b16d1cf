"""The reconciler's watches with the RBAC the README documents (Roles in each profile's
namespace), the status of a refused watch on the clusters page, the per-application indexes,
the followers of deleted clusters and unused namespaces, and Deleting as a phase."""

import pytest
from django.urls import reverse

from jobs import deploy as verbs
from jobs.models import Application, Cluster, Phase
from jobs.reconciler.watching import KINDS, ClusterFollower
from tests.fakes.kube_objects import PROD_NAMESPACE, predictor_pod, with_status
from tests.helpers import SHORTEST

NS = PROD_NAMESPACE
MANIFEST = SHORTEST.replace("profileName: local", "profileName: prod")


def settle(follower) -> None:
    for kind in KINDS:
        follower.watch_round(kind)
    follower.drain()


def relist_all(follower) -> None:
    for kind in KINDS:
        follower.relist(kind)
    follower.drain()


def event(name: str, about: str, kind: str = "Pod", reason: str = "BackOff") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": kind, "name": about, "namespace": NS},
        "reason": reason,
        "message": f"{reason} on {about}",
        "type": "Warning",
    }


# --- bug 1: namespaced watches ------------------------------------------------------------


def test_with_namespaced_rights_the_watches_follow_the_application(prod, deployer, kube):
    app = verbs.apply(MANIFEST, deployer).application
    kube.namespaced_rbac(NS)
    follower = ClusterFollower(prod, watch_timeout=1)
    relist_all(follower)
    kube.put(with_status(kube.get("InferenceService", "bge-embed", NS), True))
    kube.put(predictor_pod("bge-embed", NS))
    settle(follower)
    app.refresh_from_db()
    assert app.phase == Phase.RUNNING, app.reason
    listed = [r for r in kube.requests if r.method == "GET" and "/namespaces/" not in r.path]
    assert not [r.path for r in listed if r.path.endswith(("pods", "events", "inferenceservices"))]


def test_the_extra_namespaces_of_a_profile_are_watched(prod, deployer, kube):
    profile = prod.profiles.get()
    profile.extra_namespaces = ["batch"]
    profile.save()
    kube.namespaced_rbac(NS, "batch")
    follower = ClusterFollower(prod, watch_timeout=1)
    follower.refresh_known()
    assert follower.namespaces == {NS, "batch"}
    relist_all(follower)
    kube.put(predictor_pod("other-app", "batch"))
    follower.watch_round("pods", "batch")
    assert ("batch", "other-app-predictor-5d8f-x7k2p") in follower.seen["pods"]


def test_a_refused_watch_is_shown_on_the_clusters_page_and_retried_slowly(prod, kube, as_admin):
    kube.namespaced_rbac("elsewhere")  # no right in the profile's namespace
    follower = ClusterFollower(prod, watch_timeout=1, max_backoff=30, refused_backoff=300)
    waits = [follower.follow_step("pods", NS) for _ in range(6)]
    assert all(wait >= 30 for wait in waits) and waits[-1] == 300
    cluster = Cluster.objects.get(pk=prod.pk)
    assert f"in namespace {NS}" in cluster.watch_error
    assert 'resources: ["pods"], verbs: ["list"]' in cluster.watch_error
    page = as_admin.get(reverse("jobs:clusters")).content.decode()
    assert "cannot follow cluster prod" in page and "resources: [&quot;pods&quot;]" in page
    kube.namespaced_rbac(NS)  # the admin granted the Role
    assert follower.follow_step("pods", NS) == 0
    assert Cluster.objects.get(pk=prod.pk).watch_error == ""
    assert "cannot follow" not in as_admin.get(reverse("jobs:clusters")).content.decode()


def test_an_error_an_earlier_follower_saved_goes_once_a_watch_works(prod, kube):
    Cluster.objects.filter(pk=prod.pk).update(watch_error="refused before the restart")
    follower = ClusterFollower(Cluster.objects.get(pk=prod.pk), watch_timeout=1)
    assert follower.follow_step("events", NS) == 0
    assert Cluster.objects.get(pk=prod.pk).watch_error == ""


# --- bug 1: indexes -----------------------------------------------------------------------


def test_an_application_reads_only_its_own_pods_and_events(prod, deployer, kube):
    verbs.apply(MANIFEST, deployer)
    for n in range(20):
        kube.put(predictor_pod(f"other{n}", NS))
        kube.put(event(f"other{n}.1", f"other{n}-predictor-5d8f-x7k2p"))
    kube.put(predictor_pod("bge-embed", NS))
    kube.put(event("bge.1", "bge-embed-predictor-5d8f-x7k2p"))
    kube.put(event("bge.2", "bge-embed", kind="InferenceService", reason="InternalError"))
    follower = ClusterFollower(prod, watch_timeout=1)
    relist_all(follower)
    _, pods, events = follower.objects_of(NS, "bge-embed", "acme")
    assert [p["metadata"]["name"] for p in pods] == ["bge-embed-predictor-5d8f-x7k2p"]
    assert sorted(e["metadata"]["name"] for e in events) == ["bge.1", "bge.2"]
    kube.emit("DELETED", kube.get("Pod", "bge-embed-predictor-5d8f-x7k2p", NS))
    follower.watch_round("pods")
    assert follower.objects_of(NS, "bge-embed", "acme")[1] == []
    assert (NS, "bge-embed") not in follower.index["pods"]


# --- bug 1: followers that stop -----------------------------------------------------------


def test_the_streams_of_a_namespace_no_longer_used_stop(prod, kube):
    profile = prod.profiles.get()
    profile.extra_namespaces = ["batch"]
    profile.save()
    follower = ClusterFollower(prod, watch_timeout=1)
    follower.sync_streams()
    try:
        assert {ns for _, ns in follower.streams} == {NS, "batch"}
        batch = follower.streams[("pods", "batch")]
        profile.extra_namespaces = []
        profile.save()
        follower.sync_streams()
        assert {ns for _, ns in follower.streams} == {NS}
        assert batch.is_set()
    finally:
        follower.stop()


@pytest.mark.database_file  # the followers' threads read beside this one
def test_the_follower_of_a_deleted_cluster_stops(prod, kube, transactional_db):
    from jobs.reconciler import Reconciler

    reconciler = Reconciler()
    try:
        reconciler.follow_clusters()
        _, follower = reconciler.followers[prod.pk]
        prod.profiles.all().delete()
        prod.delete()
        reconciler.follow_clusters()
        assert prod.pk not in reconciler.followers
        assert follower.stopping.is_set()
        assert all(stop.is_set() for stop in follower.streams.values())
    finally:
        for _, each in reconciler.followers.values():
            each.stop()


# --- bug 2: Deleting is a phase -----------------------------------------------------------


def test_a_delete_is_deleting_until_the_clusters_objects_are_gone(prod, deployer, kube):
    app = verbs.apply(MANIFEST, deployer).application
    kube.put(predictor_pod("bge-embed", NS))  # its pod takes time to go
    follower = ClusterFollower(prod, watch_timeout=1)
    relist_all(follower)
    assert verbs.delete(app, deployer) == ""
    app.refresh_from_db()
    assert app.phase == Phase.DELETING
    assert kube.get("InferenceService", "bge-embed", NS) is None
    settle(follower)
    assert Application.objects.get(pk=app.pk).phase == Phase.DELETING
    kube.emit("DELETED", kube.get("Pod", "bge-embed-predictor-5d8f-x7k2p", NS))
    settle(follower)
    assert not Application.objects.filter(pk=app.pk).exists()


def test_an_object_deleted_outside_the_console_completes_a_delete_after_a_relist(
    prod, deployer, kube
):
    app = verbs.apply(MANIFEST, deployer).application
    app.phase = Phase.DELETING
    app.save()
    follower = ClusterFollower(prod, watch_timeout=1)
    relist_all(follower)
    assert Application.objects.filter(pk=app.pk).exists()  # its InferenceService is there
    kube.emit("DELETED", kube.get("InferenceService", "bge-embed", NS))
    kube.compact()  # the watch missed it: a relist must find it gone
    relist_all(follower)
    assert not Application.objects.filter(pk=app.pk).exists()


def test_the_api_answers_202_while_deleting(prod, deployer, kube, client):
    from tests.helpers import bearer

    verbs.apply(MANIFEST, deployer)
    kube.put(predictor_pod("bge-embed", NS))
    response = client.delete("/api/v1/applications/bge-embed", **bearer(deployer))
    assert response.status_code == 202, response.content
    assert response.json()["phase"] == "Deleting"
    assert Application.objects.get(name="bge-embed").phase == Phase.DELETING


def test_the_command_and_the_page_say_deleting(prod, deployer, kube):
    from io import StringIO

    from django.core.management import call_command

    from tests.helpers import client_for

    verbs.apply(MANIFEST, deployer)
    kube.put(predictor_pod("bge-embed", NS))
    out = StringIO()
    call_command("app", "delete", "bge-embed", "--user", "dan", stdout=out)
    assert out.getvalue().startswith("application/bge-embed deleting")
    assert Application.objects.get(name="bge-embed").phase == Phase.DELETING
    page = client_for(deployer).get(reverse("jobs:application-detail", args=["bge-embed"]))
    assert page.status_code == 200 and "Deleting" in page.content.decode()
