"""The emulator's exact RBAC and its Leases, pinned through plain HTTP as a real API server
answers them: each request checked by verb, API group, resource (with its subresource),
namespace and name against the rules granted; a server-side apply that creates needs create;
a Lease replaced from a stale resourceVersion is a 409."""

import json
import urllib.error
import urllib.request

from tests.fakes.kube import Refusal

ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/models/inferenceservices"
PODS = "/api/v1/namespaces/models/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/servedeck/leases"
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
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def isvc(name="llama"):
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "models"},
        "spec": {"predictor": {"minReplicas": 1}},
    }


def rule(group, resource, *verbs, names=()):
    found = {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
    if names:
        found["resourceNames"] = list(names)
    return found


def test_a_role_grants_its_verbs_in_its_namespace_only(kube):
    kube.rbac({"models": [rule("", "pods", "list")]})
    assert call(kube, "GET", PODS)[0] == 200
    status, body = call(kube, "GET", PODS, watch="true")
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "" is forbidden: User "system:serviceaccount:servedeck:console" cannot watch '
        'resource "pods" in API group "" in the namespace "models"'
    )
    assert call(kube, "GET", "/api/v1/namespaces/other/pods")[0] == 403
    assert call(kube, "GET", "/api/v1/pods")[0] == 403  # all namespaces: a ClusterRole's
    assert kube.refusals == [
        Refusal("watch", "", "pods", "models", None),
        Refusal("list", "", "pods", "other", None),
        Refusal("list", "", "pods", None, None),
    ]


def test_a_subresource_is_a_rule_of_its_own(kube):
    kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "models"},
              "spec": {"containers": [{"name": "c"}]}})  # fmt: skip
    kube.rbac({"models": [rule("", "pods", "get")]})
    status, body = call(kube, "GET", f"{PODS}/p/log")
    assert status == 403 and 'resource "pods/log"' in body["message"]
    kube.rbac({"models": [rule("", "pods/log", "get")]})
    assert call(kube, "GET", f"{PODS}/p")[0] == 403
    assert urllib.request.urlopen(kube.url + f"{PODS}/p/log", timeout=10).status == 200


def test_a_cluster_role_grants_everywhere_and_at_cluster_scope(kube):
    kube.rbac(cluster=[rule("serving.kserve.io", "localmodelcaches", "list"),
                       rule("", "pods", "list")])  # fmt: skip
    assert call(kube, "GET", "/apis/serving.kserve.io/v1alpha1/localmodelcaches")[0] == 200
    assert call(kube, "GET", "/api/v1/pods")[0] == 200
    assert call(kube, "GET", "/api/v1/namespaces/anywhere/pods")[0] == 200
    assert call(kube, "GET", "/apis/serving.kserve.io/v1alpha1/localmodelnodegroups")[0] == 403


def test_resource_names_limit_a_rule_to_those_objects(kube):
    kube.rbac({"servedeck": [rule("coordination.k8s.io", "leases", "get", names=["mine"])]})
    assert call(kube, "GET", f"{LEASES}/mine")[0] == 404  # allowed, and not there
    assert call(kube, "GET", f"{LEASES}/theirs")[0] == 403
    assert call(kube, "GET", LEASES)[0] == 403  # a list names no object


def test_an_apply_that_creates_needs_create_and_one_that_updates_patch(kube):
    kube.rbac({"models": [rule("serving.kserve.io", "inferenceservices", "patch")]})
    path = f"{ISVCS}/llama"
    status, body = call(kube, "PATCH", path, isvc(), APPLY, fieldManager="servedeck")
    assert status == 403 and "cannot create resource" in body["message"]
    status, _ = call(kube, "PATCH", path, isvc(), APPLY, fieldManager="servedeck", dryRun="All")
    assert status == 403  # a dry run is asked the same
    kube.put(isvc())
    assert call(kube, "PATCH", path, isvc(), APPLY, fieldManager="servedeck")[0] == 200


def test_no_rules_set_allows_everything_again(kube):
    kube.rbac({"models": []})
    assert call(kube, "GET", PODS)[0] == 403
    kube.rbac()
    assert call(kube, "GET", PODS)[0] == 200
    assert kube.refusals == []


def lease(holder, version=None):
    meta = {"name": "leader", "namespace": "servedeck"}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}  # fmt: skip


def test_a_lease_is_created_once_and_replaced_only_from_its_current_version(kube):
    status, made = call(kube, "POST", LEASES, lease("a"))
    assert status == 201
    status, body = call(kube, "POST", LEASES, lease("b"))
    assert status == 409 and body["reason"] == "AlreadyExists"
    version = made["metadata"]["resourceVersion"]
    status, replaced = call(kube, "PUT", f"{LEASES}/leader", lease("a", version))
    assert status == 200
    status, body = call(kube, "PUT", f"{LEASES}/leader", lease("b", version))  # stale
    assert status == 409 and "has been modified" in body["message"]
    assert kube.get("Lease", "leader", "servedeck")["spec"]["holderIdentity"] == "a"
    assert replaced["metadata"]["resourceVersion"] != version
