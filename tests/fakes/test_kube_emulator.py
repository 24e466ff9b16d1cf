"""The Kubernetes API emulator is the oracle of the backend and reconciler tests: what it says
on the wire is pinned here, through plain HTTP, as a real API server says it (server-side apply
with field managers, resourceVersions, watch resume, 410 Gone, label selectors, dryRun=All,
and the namespaced RBAC the README documents)."""

import json
import urllib.error
import urllib.request

import pytest

ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/models/inferenceservices"
APPLY = "application/apply-patch+yaml"


def call(kube, method, path, body=None, content_type="application/json", **query):
    url = kube.url + path
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def json_call(kube, method, path, body=None, content_type="application/json", **query):
    status, raw = call(kube, method, path, body, content_type, **query)
    return status, json.loads(raw)


def watch(kube, path, **query) -> list[dict]:
    status, raw = call(kube, "GET", path, watch="true", timeoutSeconds="1", **query)
    assert status == 200
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def isvc(name="llama", labels=None, **spec) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "models", "labels": labels or {}},
        "spec": spec or {"predictor": {"minReplicas": 1}},
    }


def apply(kube, body, manager="servedeck", **query):
    name = body["metadata"]["name"]
    return json_call(kube, "PATCH", f"{ISVCS}/{name}", body, APPLY, fieldManager=manager, **query)


def managers(obj) -> dict[str, str]:
    return {m["manager"]: m["operation"] for m in obj["metadata"].get("managedFields") or []}


# --- server-side apply -------------------------------------------------------------------


def test_apply_creates_with_201_and_records_the_field_manager(kube):
    status, created = apply(kube, isvc())
    assert status == 201
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert managers(created) == {"servedeck": "Apply"}
    status, again = apply(kube, isvc(predictor={"minReplicas": 2}))
    assert status == 200 and again["spec"]["predictor"]["minReplicas"] == 2


def test_apply_merges_the_fields_of_two_managers_and_drops_what_one_stops_sending(kube):
    apply(kube, isvc(predictor={"minReplicas": 1, "maxReplicas": 3}))
    apply(kube, isvc(predictor={"timeout": 60}), manager="other")
    live = kube.get("InferenceService", "llama", "models")
    assert live["spec"]["predictor"] == {"minReplicas": 1, "maxReplicas": 3, "timeout": 60}
    assert managers(live) == {"servedeck": "Apply", "other": "Apply"}
    apply(kube, isvc(predictor={"minReplicas": 1}))  # servedeck no longer sends maxReplicas
    live = kube.get("InferenceService", "llama", "models")
    assert live["spec"]["predictor"] == {"minReplicas": 1, "timeout": 60}


def test_a_field_another_manager_owns_conflicts_unless_forced(kube):
    apply(kube, isvc(predictor={"minReplicas": 1}))
    status, body = apply(kube, isvc(predictor={"minReplicas": 5}), manager="kubectl-edit")
    assert status == 409 and body["reason"] == "Conflict"
    assert body["details"]["causes"][0]["reason"] == "FieldManagerConflict"
    assert 'conflict with "servedeck"' in body["message"]
    status, body = apply(kube, isvc(predictor={"minReplicas": 5}), "kubectl-edit", force="true")
    assert status == 200 and body["spec"]["predictor"]["minReplicas"] == 5


def test_apply_without_a_field_manager_is_invalid(kube):
    status, body = json_call(kube, "PATCH", f"{ISVCS}/llama", isvc(), APPLY)
    assert status == 422 and "fieldManager" in body["message"]


# --- resourceVersion and watches ---------------------------------------------------------


def test_every_write_increments_the_resource_version_and_a_no_op_apply_writes_nothing(kube):
    _, first = apply(kube, isvc())
    _, second = apply(kube, isvc(predictor={"minReplicas": 2}))
    _, same = apply(kube, isvc(predictor={"minReplicas": 2}))
    rv = [int(o["metadata"]["resourceVersion"]) for o in (first, second, same)]
    assert rv[0] < rv[1] == rv[2]
    _, listing = json_call(kube, "GET", ISVCS)
    assert int(listing["metadata"]["resourceVersion"]) >= rv[1]


def test_a_watch_resumes_after_the_resource_version_it_names(kube):
    _, created = apply(kube, isvc())
    since = created["metadata"]["resourceVersion"]
    apply(kube, isvc(predictor={"minReplicas": 2}))
    apply(kube, isvc("other"))
    json_call(kube, "DELETE", f"{ISVCS}/llama")
    events = watch(kube, ISVCS, resourceVersion=since)
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen == [("MODIFIED", "llama"), ("ADDED", "other"), ("DELETED", "llama")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(since)


def test_a_watch_from_zero_starts_with_the_objects_there(kube):
    apply(kube, isvc())
    assert [e["type"] for e in watch(kube, ISVCS)] == ["ADDED"]


def test_a_too_old_resource_version_is_410_gone(kube):
    _, created = apply(kube, isvc())
    apply(kube, isvc(predictor={"minReplicas": 2}))
    kube.compact()
    events = watch(kube, ISVCS, resourceVersion=created["metadata"]["resourceVersion"])
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    # From the list's resourceVersion, after the compaction, it watches again.
    _, listing = json_call(kube, "GET", ISVCS)
    assert watch(kube, ISVCS, resourceVersion=listing["metadata"]["resourceVersion"]) == []


def test_a_bookmark_ends_a_watch_that_asks_for_them(kube):
    apply(kube, isvc())
    events = watch(kube, ISVCS, resourceVersion=kube.resource_version, allowWatchBookmarks="true")
    assert [e["type"] for e in events] == ["BOOKMARK"]


# --- selectors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "selector, names",
    [
        ("app=a", ["a1", "a2"]),
        ("app!=a", ["b1", "plain"]),
        ("app in (a,b)", ["a1", "a2", "b1"]),
        ("app notin (a)", ["b1", "plain"]),
        ("app", ["a1", "a2", "b1"]),
        ("!app", ["plain"]),
        ("app=a,tier=web", ["a2"]),
    ],
)
def test_label_selectors_on_lists_and_watches(kube, selector, names):
    for name, labels in [("a1", {"app": "a"}), ("a2", {"app": "a", "tier": "web"}),
                         ("b1", {"app": "b"}), ("plain", {})]:  # fmt: skip
        apply(kube, isvc(name, labels))
    query = {"labelSelector": urllib.request.quote(selector)}
    _, listing = json_call(kube, "GET", ISVCS, **query)
    assert sorted(o["metadata"]["name"] for o in listing["items"]) == names
    watched = watch(kube, ISVCS, **query)
    assert sorted(e["object"]["metadata"]["name"] for e in watched) == names


def test_a_selector_that_does_not_parse_is_400(kube):
    status, _ = json_call(kube, "GET", ISVCS, labelSelector=urllib.request.quote("app=(a"))
    assert status == 400


# --- dryRun=All --------------------------------------------------------------------------


def test_dry_run_answers_as_the_write_would_and_stores_nothing(kube):
    before = kube.resource_version
    status, body = apply(kube, isvc(), dryRun="All")
    assert status == 201 and body["metadata"]["name"] == "llama"
    assert kube.get("InferenceService", "llama", "models") is None
    status, _ = json_call(kube, "POST", ISVCS, isvc(), dryRun="All")
    assert status == 201 and kube.get("InferenceService", "llama", "models") is None
    assert kube.resource_version == before
    apply(kube, isvc())
    status, _ = json_call(kube, "DELETE", f"{ISVCS}/llama", dryRun="All")
    assert status == 200 and kube.get("InferenceService", "llama", "models") is not None


# --- RBAC --------------------------------------------------------------------------------


def test_a_namespaced_rbac_refuses_cluster_wide_lists_and_watches(kube):
    kube.namespaced_rbac("models")
    status, _ = json_call(kube, "GET", ISVCS)
    assert status == 200
    status, body = json_call(kube, "GET", "/apis/serving.kserve.io/v1beta1/inferenceservices")
    assert status == 403 and body["reason"] == "Forbidden"
    assert 'cannot list resource "inferenceservices"' in body["message"]
    assert "at the cluster scope" in body["message"]
    status, body = json_call(kube, "GET", "/api/v1/pods", watch="true")
    assert status == 403 and 'cannot watch resource "pods"' in body["message"]
    status, body = json_call(kube, "GET", "/api/v1/namespaces/elsewhere/events")
    assert status == 403 and 'in the namespace "elsewhere"' in body["message"]
    kube.namespaced_rbac()
    assert json_call(kube, "GET", "/api/v1/pods")[0] == 200


VMS = "/apis/kubevirt.io/v1/namespaces/models/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/namespaces/models/virtualmachineinstances"


@pytest.mark.parametrize(("strategy", "comes_back"), [("Always", True), ("Halted", False)])
def test_a_deleted_instance_of_a_running_machine_comes_back(kube, strategy, comes_back):
    machine = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "m", "namespace": "models"},
        "spec": {
            "runStrategy": strategy,
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"domain": {}}},
        },
    }
    kube.put(machine)
    kube.put({**machine, "kind": "VirtualMachineInstance", "spec": {"domain": {}}})
    old = kube.get("VirtualMachineInstance", "m", "models")["metadata"]["uid"]
    status, _ = call(kube, "DELETE", f"{VMIS}/m")
    assert status == 200
    fresh = kube.get("VirtualMachineInstance", "m", "models")
    assert (fresh is not None) is comes_back
    if comes_back:
        assert fresh["metadata"]["uid"] != old
        assert fresh["metadata"]["labels"] == {"a": "b"}
        assert fresh["status"] == {"phase": "Pending"}


def test_a_halted_machine_loses_its_instance_and_launcher_pod(kube):
    labels = {"a": "b"}
    machine = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "m", "namespace": "models"},
        "spec": {
            "runStrategy": "Always",
            "template": {"metadata": {"labels": labels}, "spec": {"domain": {}}},
        },
    }
    kube.put(machine)
    for name in ("m", "other"):
        kube.put({**machine, "kind": "VirtualMachineInstance", "metadata": {"name": name,
                  "namespace": "models"}, "spec": {"domain": {}}})  # fmt: skip
        pod = {"name": f"virt-launcher-{name}-x", "namespace": "models",
               "labels": {"vm.kubevirt.io/name": name}}  # fmt: skip
        kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": pod, "spec": {}})
    patch = {"spec": {"runStrategy": "Halted"}}
    status, _ = call(kube, "PATCH", f"{VMS}/m", patch, "application/merge-patch+json")
    assert status == 200
    assert kube.get("VirtualMachineInstance", "m", "models") is None
    assert [p["metadata"]["name"] for p in kube.objects("Pod", "models")] == [
        "virt-launcher-other-x"
    ]
    assert kube.get("VirtualMachineInstance", "other", "models") is not None
    assert kube.get("VirtualMachine", "m", "models")["spec"]["runStrategy"] == "Halted"


def test_services_claims_and_policies_are_served(kube):
    for path in (
        "/api/v1/namespaces/models/services",
        "/api/v1/namespaces/models/persistentvolumeclaims",
        "/api/v1/namespaces/models/configmaps",
        "/apis/networking.k8s.io/v1/namespaces/models/networkpolicies",
        VMS,
        "/apis/kubevirt.io/v1/kubevirts",
    ):
        status, body = json_call(kube, "GET", path)
        assert (status, body["items"]) == (200, []), path


# --- nodes, and lists in pages -------------------------------------------------------------


def test_nodes_are_cluster_scoped_and_a_list_with_a_limit_comes_in_pages(kube):
    from tests.fakes.kube_objects import node

    for name in ("a", "b", "c"):
        kube.put(node(name, "us-east-2"))
    status, page = json_call(kube, "GET", "/api/v1/nodes", limit="2")
    assert status == 200 and page["kind"] == "NodeList"
    assert [n["metadata"]["name"] for n in page["items"]] == ["a", "b"]
    assert page["metadata"]["remainingItemCount"] == 1
    after = {"continue": page["metadata"]["continue"]}
    _, rest = json_call(kube, "GET", "/api/v1/nodes", limit="2", **after)
    assert [n["metadata"]["name"] for n in rest["items"]] == ["c"]
    assert "continue" not in rest["metadata"]
    status, _ = json_call(kube, "GET", "/api/v1/namespaces/models/nodes")
    assert status == 404  # not namespaced
