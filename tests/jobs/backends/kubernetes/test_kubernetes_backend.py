"""The Kubernetes backend against the emulator (tests/fakes/kube.py): the real `kubernetes`
client, a real kubeconfig file, HTTP on 127.0.0.1. Objects come from the real renderer.

No database: a Cluster row is only read, so an unsaved one does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.kubernetes.kserve_client import (
    FIELD_MANAGER,
    STOP_ANNOTATION,
    BackendError,
    Discovery,
    Gone,
    KServeClient,
    NotFound,
    Unreachable,
)
from jobs.machine_catalog import default_machine_catalog
from jobs.manifest import ManifestContext, ProfileFacts, parse
from jobs.models import ADDONS, Cluster
from jobs.render import APP_LABEL, RenderTarget, render
from jobs.render.common import NAMESPACE_LABEL, ORGANIZATION_LABEL
from tests.fakes.kube import KSERVE, KSERVE_ALPHA, TOKEN, USER, KubeEmulator

NS = "models"
ORG = "acme"
COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"
GIB = 2**30
ALL = frozenset(ADDONS)
DOMAIN = {"exposure": "Domain", "domain": "models.example.com", "accessPolicy": "partners"}
SERVER_SET = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
KINDS = ("LocalModelCache", "ServingRuntime", "InferenceService", "HTTPRoute")


# --- helpers -------------------------------------------------------------------------------


def rendered(
    name: str = "llama",
    namespace: str = NS,
    *,
    revision: int = 1,
    domain: bool = False,
    cache: bool = True,
    replicas: int = 1,
    organization: str = ORG,
) -> list[dict]:
    """What jobs.render makes for a GPU model of `organization` on a cluster with every
    add-on."""
    profile = ProfileFacts(
        name="prod",
        namespace=namespace,
        machine_catalog=tuple(default_machine_catalog()),
        addons=ALL,
        queues=("gpu-queue",),
        cache_node_groups={"gpu-l4": 500 * GIB},
    )
    ctx = ManifestContext(
        profiles={"prod": profile},
        verified_domains=frozenset({"models.example.com"}),
        access_policies=frozenset({"partners"}),
    )
    model: dict[str, Any] = {
        "uri": f"hf://Qwen/Qwen3-8B:{COMMIT}",
        "resources": {"accelerator": {"gpu": {"model": "l4", "countPerReplica": 1}}},
        "scaling": {"minReplicas": replicas},
    }
    if cache:
        model["cache"] = {"enabled": True, "size": "20Gi"}
    spec: dict[str, Any] = {
        "name": name,
        "profileName": "prod",
        "source": {"type": "Model", "model": model},
    }
    if domain:
        spec["access"] = DOMAIN
    result = parse({"apiVersion": "servedeck.io/v1", "kind": "Application", "spec": spec}, ctx)
    assert result.ok, [str(p) for p in result.refusals]
    target = RenderTarget(
        namespace=namespace,
        machine_catalog=profile.machine_catalog,
        addons=ALL,
        organization=organization,
        organization_name=organization.title(),
    )
    return render(result.manifest, target, revision=revision)


def cluster_for(kube: KubeEmulator, context: str = "emulator", path: str | None = None) -> Cluster:
    return Cluster(
        name="gpu-prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(path or kube.kubeconfig_path),
        context=context,
    )


def on_cluster(kube: KubeEmulator, namespace: str | None = None) -> dict[tuple[str, str], dict]:
    """(kind, name) -> object, for everything of our kinds on the emulator."""
    found = {}
    for kind in KINDS:
        for obj in kube.objects(kind):
            if namespace is None or obj["metadata"].get("namespace", namespace) == namespace:
                found[(kind, obj["metadata"]["name"])] = obj
    return found


def as_rendered(obj: dict) -> dict:
    """A cluster object without what the API server adds."""
    obj = copy.deepcopy(obj)
    obj.pop("status", None)
    for key in SERVER_SET:
        obj["metadata"].pop(key, None)
    return obj


def pod(
    name: str, app: str = "llama", namespace: str = NS, organization: str = ORG, **labels: str
) -> dict:
    """A predictor pod as KServe's Deployment makes it: the InferenceService's labels copied."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {
                APP_LABEL: app,
                ORGANIZATION_LABEL: organization,
                "serving.kserve.io/inferenceservice": app,
                "component": "predictor",
                **labels,
            },
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{app}-predictor-7d9f"}],
        },
        "spec": {"containers": [{"name": "kserve-container", "image": "kserve/huggingface"}]},
        "status": {"phase": "Running"},
    }


def event(name: str, about_kind: str, about: str, reason: str, namespace: str = NS) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": about_kind, "name": about, "namespace": namespace},
        "reason": reason,
        "message": f"{reason} for {about}",
        "type": "Normal",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }


@pytest.fixture
def backend(kube: KubeEmulator) -> KServeClient:
    with KServeClient.for_cluster(cluster_for(kube)) as made:
        yield made


# --- connection ----------------------------------------------------------------------------


def test_a_cluster_row_connects_through_its_kubeconfig_and_context(kube, backend):
    assert backend.discover().version == "v1.31.4"
    request = kube.requests[-1]
    assert request.authorization == f"Bearer {TOKEN}"  # the kubeconfig's user, sent
    assert backend.connection.source == f"kubeconfig {kube.kubeconfig_path} (context emulator)"


def test_a_cluster_that_is_down_answers_fast_and_clearly(kube):
    # The kubeconfig's other context points at a closed port.
    down = KServeClient.for_cluster(cluster_for(kube, context="unreachable"))
    with pytest.raises(Unreachable) as caught:
        down.apply(rendered())
    error = caught.value
    assert error.status is None
    assert error.reason.startswith("Cannot reach the Kubernetes API at http://127.0.0.1:")
    assert error.reason.endswith(": connection refused")
    assert "context unreachable" in error.next_step
    assert "Traceback" not in str(error)
    with pytest.raises(Unreachable):
        down.dry_run(rendered())  # no cluster to ask: not a refusal of the objects


def test_an_api_server_that_goes_away_and_comes_back(kube, backend):
    backend.apply(rendered())
    with kube.down(), pytest.raises(Unreachable, match="connection refused"):
        backend.observe("llama", NS, organization=ORG)
    assert backend.observe("llama", NS, organization=ORG).isvc is not None


def test_a_slow_api_server_times_out_with_the_read_timeout(kube):
    slow = KServeClient.for_cluster(cluster_for(kube), read_timeout=0.3)
    kube.fail_next(None, verb="list", resource="pods", delay=1.0)
    with pytest.raises(Unreachable) as caught:
        slow.observe("llama", NS, organization=ORG)
    assert caught.value.reason.endswith("did not answer within 0.3 s")


def test_a_missing_kubeconfig_is_named(kube):
    missing = kube.directory / "nowhere.yaml"
    broken = KServeClient.for_cluster(cluster_for(kube, path=str(missing)))
    with pytest.raises(BackendError) as caught:
        broken.discover()
    assert f"Cannot use cluster gpu-prod's kubeconfig {missing} (context emulator)" in str(
        caught.value
    )
    assert "does not exist" in caught.value.reason
    assert "name a kubeconfig file in the folder" in caught.value.next_step


def test_a_broken_kubeconfig_is_named(kube):
    broken_file = kube.directory / "broken.yaml"
    broken_file.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    broken = KServeClient.for_cluster(cluster_for(kube, path=str(broken_file)))
    with pytest.raises(BackendError) as caught:
        broken.discover()
    assert f"Cannot use cluster gpu-prod's kubeconfig {broken_file}" in caught.value.reason
    assert "Fix the kubeconfig path and context" in caught.value.next_step


def write_empty_kubeconfig(path: Path) -> Path:
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    return path


@pytest.mark.parametrize(
    "how",
    ["path-list", "home", "outside", "symlink-out", "folder-itself", "empty"],
)
def test_the_client_reads_only_one_file_inside_the_folder(kube, tmp_path, settings, how):
    """A cluster row written past the form (or before the rule) still cannot make the real
    client read a file of the host: here the emulator's kubeconfig, kept outside the folder."""
    folder = tmp_path / "kubeconfigs"
    folder.mkdir()
    settings.SERVEDECK_KUBECONFIG_DIR = folder
    inside = write_empty_kubeconfig(folder / "x")
    outside = kube.kubeconfig_path  # reaches the emulator: reading it would connect
    (folder / "link").symlink_to(outside)
    path = {
        "path-list": f"{inside}:{outside}",
        "home": "~/.kube/config",
        "outside": str(outside),
        "symlink-out": str(folder / "link"),
        "folder-itself": str(folder),
        "empty": "",
    }[how]
    row = cluster_for(kube)
    row.kubeconfig_path = path
    seen = len(kube.requests)
    with KServeClient.for_cluster(row) as backend, pytest.raises(BackendError) as caught:
        backend.discover()
    assert len(kube.requests) == seen  # nothing reached the API server
    assert str(folder) in caught.value.reason
    assert "Give the path of one kubeconfig file in" in caught.value.reason


def test_a_relative_path_is_a_file_of_the_folder(kube):
    row = cluster_for(kube, path="kubeconfig")
    with KServeClient.for_cluster(row) as backend:
        assert backend.discover().version == "v1.31.4"


def test_in_cluster_outside_a_cluster_says_so(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    row = Cluster(name="gpu-prod", backend=Cluster.Backend.KUBERNETES, in_cluster=True)
    with pytest.raises(BackendError) as caught:
        KServeClient.for_cluster(row).discover()
    assert caught.value.reason == (
        "Cannot use cluster gpu-prod's in-cluster service account: Service host/port is not set"
    )


# --- discovery -----------------------------------------------------------------------------


def node_group(name: str, limit: str) -> dict:
    return {
        "apiVersion": KSERVE_ALPHA,
        "kind": "LocalModelNodeGroup",
        "metadata": {"name": name},
        "spec": {"storageLimit": limit, "persistentVolumeSpec": {}},
    }


def cluster_queue(name: str) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
    }


def test_discovery_reads_addons_queues_and_cache_node_groups(kube, backend):
    kube.put(cluster_queue("gpu-queue"))
    kube.put(cluster_queue("cpu-queue"))
    kube.put(node_group("gpu-l4", "500Gi"))
    kube.put(node_group("gpu-h100", "1.5Ti"))
    assert backend.discover() == Discovery(
        version="v1.31.4",
        addons=ALL,
        queues=("cpu-queue", "gpu-queue"),
        cache_node_groups={"gpu-h100": 1536 * GIB, "gpu-l4": 500 * GIB},
        kubevirt_devices=(),  # read: its (absent) CR permits none
    )


@pytest.mark.parametrize(
    ("installed", "found"),
    [
        ((), set()),
        (("kserve",), {"kserve"}),
        (("kserve", "localModelCache"), {"kserve", "localModelCache"}),
        (("kserve", "keda", "gatewayApi"), {"kserve", "keda", "gatewayApi"}),
        (("kueue", "certManager", "kubevirt"), {"kueue", "certManager", "kubevirt"}),
    ],
)
def test_discovery_finds_only_the_addons_the_cluster_serves(kube, backend, installed, found):
    kube.reset(addons=installed)
    discovered = backend.discover()
    assert discovered.addons == found
    assert discovered.queues == ()
    assert discovered.cache_node_groups == {}


# --- dry run -------------------------------------------------------------------------------


def test_dry_run_of_a_valid_set_answers_nothing_and_changes_nothing(kube, backend):
    objects = rendered(domain=True)
    assert backend.dry_run(objects) == []
    assert on_cluster(kube) == {}
    patches = [r for r in kube.requests if r.method == "PATCH"]
    assert len(patches) == len(objects) == 3
    for request in patches:
        assert request.query == {
            "dryRun": "All",
            "fieldManager": FIELD_MANAGER,
            "fieldValidation": "Strict",
            "force": "true",
        }
        assert request.content_type == "application/apply-patch+yaml"


def test_dry_run_answers_the_servers_refusal_per_object(kube, backend):
    kube.fail_next(
        422,
        verb="patch",
        resource="InferenceService",
        causes=[("spec.predictor.minReplicas", "Invalid value: -1: must be at least 0")],
    )
    refusals = backend.dry_run(rendered())
    assert refusals == [
        "InferenceService models/llama is invalid: spec.predictor.minReplicas: Invalid value: "
        "-1: must be at least 0. Fix the field named and deploy again; the dry run shows the "
        "objects ServeDeck renders."
    ]


def test_dry_run_on_a_cluster_without_kserve_says_to_install_it(kube, backend):
    kube.reset(addons=())
    refusals = backend.dry_run(rendered(cache=False))
    assert len(refusals) == 1
    assert refusals[0].startswith(
        "InferenceService models/llama: The cluster does not serve serving.kserve.io/v1beta1 "
        "InferenceService"
    )
    assert "Install KServe on the cluster" in refusals[0]


# --- apply, prune, rollback ----------------------------------------------------------------


def test_apply_creates_every_object_with_our_labels_and_field_manager(kube, backend):
    objects = rendered(domain=True)
    backend.apply(objects)
    live = on_cluster(kube)
    assert set(live) == {(o["kind"], o["metadata"]["name"]) for o in objects}
    for obj in objects:
        got = live[(obj["kind"], obj["metadata"]["name"])]
        assert as_rendered(got) == obj
        assert got["metadata"]["labels"][APP_LABEL] == "llama"
        managers = {(m["manager"], m["operation"]) for m in got["metadata"]["managedFields"]}
        assert managers == {(FIELD_MANAGER, "Apply")}
    cache = next(o for (kind, _), o in live.items() if kind == "LocalModelCache")
    assert "namespace" not in cache["metadata"]  # cluster-scoped
    paths = [r.path for r in kube.requests if r.method == "PATCH"]
    assert paths[0].startswith(f"/apis/{KSERVE_ALPHA}/localmodelcaches/")  # cache first
    assert paths[1] == f"/apis/{KSERVE}/namespaces/{NS}/inferenceservices/llama"


def test_applying_the_same_objects_again_changes_nothing(kube, backend):
    objects = rendered(domain=True)
    backend.apply(objects)
    before = {key: obj["metadata"]["resourceVersion"] for key, obj in on_cluster(kube).items()}
    backend.apply(objects)
    after = {key: obj["metadata"]["resourceVersion"] for key, obj in on_cluster(kube).items()}
    assert after == before


def test_apply_prunes_what_the_new_render_no_longer_has(kube, backend):
    backend.apply(rendered("other", domain=True))
    backend.apply(rendered(domain=True))
    backend.apply(rendered(domain=False, revision=2))
    live = on_cluster(kube)
    assert ("HTTPRoute", "llama") not in live
    assert ("InferenceService", "llama") in live
    assert ("HTTPRoute", "other") in live  # another application's route stays


def test_apply_takes_back_fields_another_manager_changed(kube, backend):
    backend.apply(rendered(replicas=1))
    isvc = kube.get("InferenceService", "llama", NS)
    isvc["spec"]["predictor"]["minReplicas"] = 5
    isvc["metadata"]["managedFields"].append(
        {
            "manager": "kubectl-edit",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:predictor": {"f:minReplicas": {}}}},
        }
    )
    kube.put(isvc)
    backend.apply(rendered(replicas=1))
    isvc = kube.get("InferenceService", "llama", NS)
    assert isvc["spec"]["predictor"]["minReplicas"] == 1
    assert [m["manager"] for m in isvc["metadata"]["managedFields"]] == [FIELD_MANAGER]


def test_rollback_is_an_apply_of_the_older_render(kube, backend):
    first = rendered(domain=True, replicas=1, revision=1)
    backend.apply(first)
    backend.apply(rendered(domain=False, replicas=2, cache=False, revision=2))
    backend.apply(rendered(domain=False, replicas=2, cache=False, revision=3))
    backend.apply(copy.deepcopy(first))  # revision 4 rolls back to revision 1's objects
    live = on_cluster(kube)
    assert {key: as_rendered(obj) for key, obj in live.items()} == {
        (o["kind"], o["metadata"]["name"]): o for o in first
    }


def test_apply_of_a_kind_the_cluster_lacks_names_what_to_install(kube, backend):
    kube.reset(addons=("kserve", "localModelCache"))
    with pytest.raises(BackendError) as caught:
        backend.apply(rendered(domain=True))
    assert caught.value.status == 404
    assert caught.value.reason.startswith(
        "The cluster does not serve gateway.networking.k8s.io/v1 HTTPRoute"
    )
    assert caught.value.next_step.startswith("Install the Gateway API CRDs on the cluster")


def test_apply_refuses_objects_it_does_not_render(backend):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}
    with pytest.raises(BackendError, match="ServeDeck does not apply v1 Secret objects"):
        backend.apply([secret])


# --- failures in plain words ---------------------------------------------------------------


def test_a_field_manager_conflict(kube, backend):
    kube.fail_next(
        409,
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using '
        "serving.kserve.io/v1beta1: .spec.predictor.minReplicas",
        verb="patch",
        resource="InferenceService",
    )
    with pytest.raises(BackendError) as caught:
        backend.apply(rendered())
    error = caught.value
    assert error.status == 409
    assert error.reason.startswith(
        "InferenceService models/llama: another field manager (kubectl-edit) owns fields "
        "ServeDeck sets; the cluster said: Apply failed with 1 conflict"
    )
    assert "try again" in error.next_step
    assert "--show-managed-fields" in error.next_step


@pytest.mark.parametrize(
    ("resource", "verb", "role", "scope"),
    [
        ("InferenceService", "patch", "a Role in namespace models", "in namespace models"),
        ("LocalModelCache", "patch", "a ClusterRole", "at cluster scope"),
    ],
)
def test_forbidden_names_the_verb_resource_namespace_and_rule(
    kube,
    backend,
    resource,
    verb,
    role,
    scope,
):
    kube.fail_next(403, verb=verb, resource=resource)
    with pytest.raises(BackendError) as caught:
        backend.apply(rendered())
    error = caught.value
    group, plural = "serving.kserve.io", f"{resource.lower()}s"
    assert error.status == 403
    assert error.reason == f"ServeDeck ({USER}) may not {verb} {plural}.{group} {scope}"
    assert error.next_step == (
        f'Grant {USER} {role} with the rule apiGroups: ["{group}"], resources: ["{plural}"], '
        f'verbs: ["{verb}"] (and bind it), then try again.'
    )


def test_an_exceeded_quota_says_to_lower_the_request_or_raise_the_quota(kube, backend):
    kube.fail_next(
        403,
        'inferenceservices.serving.kserve.io "llama" is forbidden: exceeded quota: gpu-quota, '
        "requested: count/inferenceservices.serving.kserve.io=1, used: "
        "count/inferenceservices.serving.kserve.io=4, limited: "
        "count/inferenceservices.serving.kserve.io=4",
        verb="patch",
        resource="InferenceService",
    )
    with pytest.raises(BackendError) as caught:
        backend.apply(rendered())
    error = caught.value
    assert error.reason.startswith("InferenceService models/llama: exceeded quota: gpu-quota, ")
    assert error.next_step == (
        "Lower the request (replicas, GPUs, CPU or memory) or ask an admin to raise the "
        "ResourceQuota in namespace models."
    )


# --- restart, stop, start, delete ----------------------------------------------------------


def test_restart_replaces_the_pods_and_keeps_the_inference_service(kube, backend):
    backend.apply(rendered())
    isvc = kube.get("InferenceService", "llama", NS)
    for name in ("llama-predictor-7d9f-aaaaa", "llama-predictor-7d9f-bbbbb"):
        kube.put(pod(name))
    kube.put(pod("other-predictor-1234-ccccc", app="other"))
    assert backend.restart("llama", NS, organization=ORG) == 2
    names = {p["metadata"]["name"] for p in kube.objects("Pod", NS, f"{APP_LABEL}=llama")}
    assert len(names) == 2  # the ReplicaSet (the emulator's stand-in) made new ones
    assert names.isdisjoint({"llama-predictor-7d9f-aaaaa", "llama-predictor-7d9f-bbbbb"})
    assert kube.get("Pod", "other-predictor-1234-ccccc", NS) is not None
    assert kube.get("InferenceService", "llama", NS) == isvc  # not even its resourceVersion


def test_restart_of_an_application_not_on_the_cluster(backend):
    with pytest.raises(NotFound) as caught:
        backend.restart("llama", NS, organization=ORG)
    assert str(caught.value) == (
        "InferenceService models/llama is not on the cluster. Deploy the application."
    )


def test_stop_and_start_use_kserves_stop_annotation(kube, backend):
    backend.apply(rendered())

    def annotations() -> dict:
        return kube.get("InferenceService", "llama", NS)["metadata"]["annotations"]

    backend.stop("llama", NS, organization=ORG)
    assert annotations()[STOP_ANNOTATION] == "true"
    backend.apply(rendered(revision=2))  # a deploy while stopped stays stopped
    assert annotations()[STOP_ANNOTATION] == "true"
    assert annotations()["servedeck.io/revision"] == "2"
    backend.start("llama", NS, organization=ORG)
    assert STOP_ANNOTATION not in annotations()
    assert annotations()["servedeck.io/revision"] == "2"


def test_delete_removes_everything_of_the_application_and_nothing_else(kube, backend):
    backend.apply(rendered(domain=True))
    backend.apply(rendered("other", domain=True))
    backend.apply(rendered("llama", "staging", domain=True))  # same name, other namespace
    backend.delete("llama", NS, organization=ORG)
    for kind in ("InferenceService", "HTTPRoute"):
        assert kube.get(kind, "llama", NS) is None
        assert kube.get(kind, "other", NS) is not None
        assert kube.get(kind, "llama", "staging") is not None
    caches = {
        (c["metadata"]["labels"][NAMESPACE_LABEL], c["metadata"]["labels"][APP_LABEL])
        for c in kube.objects("LocalModelCache")
    }
    assert caches == {(NS, "other"), ("staging", "llama")}
    backend.delete("llama", NS, organization=ORG)  # again: nothing left, no error


def test_delete_on_a_cluster_without_gateway_api(kube, backend):
    backend.apply(rendered())
    kube.uninstall("gatewayApi")
    backend.delete("llama", NS, organization=ORG)
    assert on_cluster(kube) == {}


# --- observe -------------------------------------------------------------------------------


def test_observe_answers_the_isvc_its_pods_and_the_events_about_them(kube, backend):
    backend.apply(rendered())
    kube.put(pod("llama-predictor-7d9f-aaaaa"))
    kube.put(pod("other-predictor-1234-ccccc", app="other"))
    about_us = [
        event("e1", "InferenceService", "llama", "InferenceServiceReady"),
        event("e2", "Pod", "llama-predictor-7d9f-aaaaa", "Pulling"),
        event("e3", "Deployment", "llama-predictor", "ScalingReplicaSet"),
        event("e4", "Workload", "pod-llama-predictor-7d9f-aaaaa-3f2e1", "QuotaReserved"),
    ]
    for e in about_us:
        kube.put(e)
    kube.put(event("e5", "Pod", "other-predictor-1234-ccccc", "Pulling"))
    kube.put(event("e6", "InferenceService", "llama", "Ready", namespace="staging"))
    observed = backend.observe("llama", NS, organization=ORG)
    assert observed.isvc["metadata"]["name"] == "llama"
    assert [p["metadata"]["name"] for p in observed.pods] == ["llama-predictor-7d9f-aaaaa"]
    assert sorted(e["metadata"]["name"] for e in observed.events) == ["e1", "e2", "e3", "e4"]


def test_observe_an_application_not_on_the_cluster(backend):
    observed = backend.observe("llama", NS, organization=ORG)
    assert (observed.isvc, observed.pods, observed.events) == (None, [], [])


# --- list and watch, for the reconciler ----------------------------------------------------


def test_list_then_watch_from_its_resource_version(kube, backend):
    backend.apply(rendered())
    listing = backend.list_inference_services()
    assert [i["metadata"]["name"] for i in listing.items] == ["llama"]
    backend.stop("llama", NS, organization=ORG)
    backend.apply(rendered("other"))
    seen = list(backend.watch_inference_services(None, listing.resource_version, 1))
    assert [(e.type, e.object["metadata"].get("name")) for e in seen] == [
        ("MODIFIED", "llama"),
        ("ADDED", "other"),
        ("BOOKMARK", None),  # the server ended the watch: re-watch from here
    ]
    assert seen[0].object["metadata"]["annotations"][STOP_ANNOTATION] == "true"
    assert seen[-1].resource_version == kube.resource_version


def test_watches_select_servedeck_pods_and_every_event(kube, backend):
    pods, events = backend.list_pods(NS), backend.list_events(NS)
    kube.put(pod("llama-predictor-7d9f-aaaaa"))
    stranger = pod("web-5f7c-ddddd", app="web")
    del stranger["metadata"]["labels"][APP_LABEL]
    kube.put(stranger)
    kube.put(pod("llama-predictor-7d9f-bbbbb"))  # after the stranger: it was skipped
    kube.put(event("e1", "Pod", "web-5f7c-ddddd", "Pulled"))
    pod_stream = backend.watch_pods(NS, pods.resource_version, 5)
    seen = [next(pod_stream).object["metadata"]["name"] for _ in range(2)]
    pod_stream.close()
    assert seen == ["llama-predictor-7d9f-aaaaa", "llama-predictor-7d9f-bbbbb"]
    event_stream = backend.watch_events(NS, events.resource_version, 5)
    assert next(event_stream).object["metadata"]["name"] == "e1"
    event_stream.close()


def test_a_watch_from_a_forgotten_resource_version_is_gone(kube, backend):
    listing = backend.list_pods(NS)
    kube.put(pod("llama-predictor-7d9f-aaaaa"))
    kube.compact()
    with pytest.raises(Gone) as caught:
        list(backend.watch_pods(NS, listing.resource_version, 1))
    assert caught.value.status == 410
    assert caught.value.next_step == "List again and watch from the list's resourceVersion."
    relisted = backend.list_pods(NS)  # what the reconciler does next
    assert [p["metadata"]["name"] for p in relisted.items] == ["llama-predictor-7d9f-aaaaa"]
    kube.put(pod("llama-predictor-7d9f-bbbbb"))
    stream = backend.watch_pods(NS, relisted.resource_version, 5)
    assert next(stream).object["metadata"]["name"] == "llama-predictor-7d9f-bbbbb"
    stream.close()


def test_an_open_watch_ends_with_gone_when_the_history_is_compacted(kube, backend):
    listing = backend.list_pods(NS)
    kube.put(pod("llama-predictor-7d9f-aaaaa"))
    stream = backend.watch_pods(NS, listing.resource_version, 5)
    assert next(stream).type == "ADDED"
    kube.compact()
    with pytest.raises(Gone):
        next(stream)


def test_a_watch_ends_when_the_api_server_goes_down(kube, backend):
    listing = backend.list_pods(NS)
    stream = backend.watch_pods(NS, listing.resource_version, 5)
    kube.put(pod("llama-predictor-7d9f-aaaaa"))
    assert next(stream).type == "ADDED"
    with kube.down():
        assert list(stream) == []  # the stream just ends; watching again fails plainly
        with pytest.raises(Unreachable):
            next(backend.watch_pods(NS, listing.resource_version, 5))
