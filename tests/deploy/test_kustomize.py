"""deploy/ renders, is valid, and installs: each overlay through `kubectl kustomize`, every
object against Kubernetes' OpenAPI schemas of the oldest version ServeDeck supports (strict:
an unknown field is an error) and the product's own object checks, the Gateway API objects
against the fields of their CRDs that ServeDeck uses; then `kubectl apply --server-side -k`
into the Kubernetes emulator, twice (the second changes nothing). The containers are
non-root and read-only with requests and limits, the image is named in one place, Secrets are
referenced by name and never written, and the objects refer to each other correctly."""

from __future__ import annotations

import ipaddress
import re
import subprocess

import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft7Validator

from jobs.render.common import MANAGED_BY, MANAGED_BY_LABEL, our_labels
from jobs.render.validate import validate as product_checks
from tests.deploy.manifests import DEPLOY, OVERLAYS, REPO, kubectl, render

# The oldest Kubernetes ServeDeck supports (docs/kubernetes-install.md says so too).
OLDEST_KUBERNETES = "1.29.0"
SECRETS = {
    "servedeck-secret-key": {"SECRET_KEY"},
    "servedeck-database": {"DATABASE_URL"},
    "servedeck-redis": {"REDIS_URL"},
}
GATEWAY_GROUP = "gateway.networking.k8s.io"


def objects_of(overlay: str, kind: str) -> list[dict]:
    return [o for o in render(overlay) if o["kind"] == kind]


def pod_specs(overlay: str) -> list[tuple[str, dict]]:
    found = []
    for obj in render(overlay):
        if obj["kind"] in ("Deployment", "Job"):
            found.append((obj["metadata"]["name"], obj["spec"]["template"]["spec"]))
    return found


def containers(spec: dict) -> list[dict]:
    return [*(spec.get("initContainers") or []), *spec["containers"]]


# --- rendering and schemas -----------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_the_whole_install(overlay):
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render(overlay)}
    assert {
        ("Namespace", "servedeck"),
        ("ServiceAccount", "servedeck"),
        ("Deployment", "servedeck-console"),
        ("Deployment", "servedeck-gateway"),
        ("Deployment", "servedeck-reconciler"),
        ("Job", "servedeck-migrate"),
        ("HorizontalPodAutoscaler", "servedeck-gateway"),
        ("Service", "servedeck-console"),
        ("Service", "servedeck-gateway"),
        ("HTTPRoute", "servedeck-console"),
        ("HTTPRoute", "servedeck-gateway"),
        ("ReferenceGrant", "servedeck-gateway-from-profiles"),
        ("ClusterRole", "servedeck-discovery"),
        ("Role", "servedeck"),
        ("Role", "servedeck-leader-election"),
        ("PodDisruptionBudget", "servedeck-console"),
        ("NetworkPolicy", "servedeck-default-deny-ingress"),
    } <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_for_the_oldest_kubernetes_supported(overlay):
    problems = []
    for obj in render(overlay):
        where = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith(GATEWAY_GROUP + "/"):
            problems += [f"{where}: {e.message}" for e in gateway_errors(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, OLDEST_KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{where}: {error.message} at {list(error.absolute_path)}")
    # The product's own checks of what it renders (names, labels, Services, NetworkPolicies),
    # with KServe's CRDs for any KServe object.
    problems += product_checks(render(overlay))
    assert problems == []


def test_the_schemas_catch_a_misspelt_field():
    """The validation above is strict: it would catch what a typo leaves out."""
    (deployment,) = [
        o for o in objects_of("dev", "Deployment") if "console" in o["metadata"]["name"]
    ]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, OLDEST_KUBERNETES, strict=True)
    (route, *_) = objects_of("dev", "HTTPRoute")
    route["spec"]["rules"][0]["backendRef"] = []
    assert list(gateway_errors(route))


# The fields of the Gateway API's standard-channel CRDs (v1.2) that deploy/ uses, strict:
# their schemas do not come with Kubernetes, so what ServeDeck writes is pinned here.
_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
_DNS = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_GROUP = {"type": "string", "maxLength": 253, "pattern": f"^$|^{_DNS}$"}
_KIND = {"type": "string", "maxLength": 63, "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_META = {"type": "object", "required": ["name"]}


def _strict(properties: dict, required: tuple = ()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required)}  # fmt: skip


GATEWAY_SCHEMAS = {
    ("v1", "HTTPRoute"): _strict(
        {
            "apiVersion": {"const": f"{GATEWAY_GROUP}/v1"},
            "kind": {"const": "HTTPRoute"},
            "metadata": _META,
            "spec": _strict(
                {
                    "parentRefs": {"type": "array", "maxItems": 32, "items": _strict(
                        {"group": _GROUP, "kind": _KIND, "namespace": _NAME, "name": _NAME,
                         "sectionName": _NAME, "port": _PORT}, ("name",))},
                    "hostnames": {"type": "array", "maxItems": 16, "items": {
                        "type": "string", "pattern": rf"^(\*\.)?{_DNS}$"}},
                    "rules": {"type": "array", "maxItems": 16, "items": _strict({
                        "matches": {"type": "array", "maxItems": 64, "items": _strict({
                            "path": _strict({
                                "type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]},
                                "value": {"type": "string", "maxLength": 1024,
                                          "pattern": "^/"}})})},
                        "backendRefs": {"type": "array", "maxItems": 16, "items": _strict(
                            {"group": _GROUP, "kind": _KIND, "name": _NAME, "namespace": _NAME,
                             "port": _PORT, "weight": {"type": "integer", "minimum": 0}},
                            ("name",))},
                    })},
                },
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
    ("v1beta1", "ReferenceGrant"): _strict(
        {
            "apiVersion": {"const": f"{GATEWAY_GROUP}/v1beta1"},
            "kind": {"const": "ReferenceGrant"},
            "metadata": _META,
            "spec": _strict({
                "from": {"type": "array", "minItems": 1, "maxItems": 16, "items": _strict(
                    {"group": _GROUP, "kind": _KIND, "namespace": _NAME},
                    ("group", "kind", "namespace"))},
                "to": {"type": "array", "minItems": 1, "maxItems": 16, "items": _strict(
                    {"group": _GROUP, "kind": _KIND, "name": _NAME}, ("group", "kind"))},
            }, ("from", "to")),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
}  # fmt: skip


def gateway_errors(obj: dict):
    version = obj["apiVersion"].rpartition("/")[2]
    schema = GATEWAY_SCHEMAS.get((version, obj["kind"]))
    if schema is None:
        return [type("E", (), {"message": f"no schema for {obj['apiVersion']} {obj['kind']}"})]
    return Draft7Validator(schema).iter_errors(obj)


# --- what the containers may do ------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_non_root_read_only_and_bounded(overlay):
    for name, spec in pod_specs(overlay):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in containers(spec):
            where = f"{name}/{container['name']}"
            own = container["securityContext"]
            assert own["readOnlyRootFilesystem"] is True, where
            assert own["allowPrivilegeEscalation"] is False, where
            assert own["capabilities"] == {"drop": ["ALL"]}, where
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert set(resources[bound]) == {"cpu", "memory"}, where
            # What a read-only root leaves writable: the data folder and /tmp, both emptyDir.
            mounts = {m["mountPath"] for m in container.get("volumeMounts") or []}
            assert mounts == {"/var/lib/servedeck", "/tmp"}, where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_referenced_by_name_never_written(overlay):
    assert objects_of(overlay, "Secret") == []
    referenced: dict[str, set[str]] = {}
    for _, spec in pod_specs(overlay):
        for container in containers(spec):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    assert env["name"] == ref["key"], env
                    referenced.setdefault(ref["name"], set()).add(ref["key"])
            assert not [e for e in container.get("envFrom") or [] if "secretRef" in e]
    assert referenced == SECRETS


def test_the_image_is_named_in_one_place():
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    (image,) = base["images"]
    for path in DEPLOY.rglob("*.yaml"):
        if path.name == "kustomization.yaml":
            assert path == DEPLOY / "base" / "kustomization.yaml" or "images" not in (
                yaml.safe_load(path.read_text()) or {}
            ), path
            continue
        for line in path.read_text().splitlines():
            if line.strip().startswith("image:"):
                assert line.split(":", 1)[1].strip() == image["name"], (path, line)
    for overlay in OVERLAYS:
        for _, spec in pod_specs(overlay):
            for container in containers(spec):
                assert container["image"] == f"{image['newName']}:{image['newTag']}"


def test_the_console_runs_the_server_the_image_runs():
    """The console container starts `python -m console.serve` with the Dockerfile's
    arguments, so a change of the console's server there is a change here too."""
    cmd = (REPO / "Dockerfile").read_text().split("CMD", 1)[1]
    served = re.search(r"python -m console\.serve ([^\"\]]+)", cmd)
    assert served, cmd
    wanted = served.group(1).split()
    for overlay in OVERLAYS:
        (console,) = [
            o
            for o in objects_of(overlay, "Deployment")
            if o["metadata"]["name"] == "servedeck-console"
        ]
        container = console["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", "console.serve"]
        args = container["args"]
        assert [a for a in args if a in wanted] == wanted, args


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_probes_ask_the_routes_the_console_answers(overlay, client, db):
    (console,) = [
        o for o in objects_of(overlay, "Deployment") if o["metadata"]["name"] == "servedeck-console"
    ]
    container = console["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        path = container[probe]["httpGet"]["path"]
        assert client.get(path, HTTP_HOST="10.1.2.3").status_code == 200, path
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


# --- references between the objects ------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_objects_refer_to_each_other(overlay, settings):
    objects = render(overlay)
    pods = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["template"]["metadata"][
            "labels"
        ]
        for o in objects
        if o["kind"] == "Deployment"
    }
    services = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in objects_of(overlay, "Service")
    }

    def selects(namespace: str, labels: dict) -> bool:
        return any(
            ns == namespace and labels.items() <= pod.items() for (ns, _), pod in pods.items()
        )

    for (namespace, name), service in services.items():
        assert selects(namespace, service["spec"]["selector"]), name
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for obj in objects_of(overlay, kind):
            spec = obj["spec"]
            labels = (spec.get("selector") or spec.get("podSelector") or {}).get("matchLabels")
            if labels == {MANAGED_BY_LABEL: MANAGED_BY}:
                continue  # a profile namespace's model servers: the pods ServeDeck makes
            if labels:  # an empty podSelector (the default deny) selects every pod
                assert selects(obj["metadata"]["namespace"], labels), obj["metadata"]["name"]
    (hpa,) = objects_of(overlay, "HorizontalPodAutoscaler")
    assert ("servedeck", hpa["spec"]["scaleTargetRef"]["name"]) in pods
    # Domain exposure sends requests to SERVEDECK_GATEWAY_SERVICE: that Service, that port.
    namespace, _, rest = settings.SERVEDECK_GATEWAY_SERVICE.partition("/")
    name, _, port = rest.partition(":")
    assert int(port) in {p["port"] for p in services[(namespace, name)]["spec"]["ports"]}
    (grant,) = objects_of(overlay, "ReferenceGrant")
    assert grant["metadata"]["namespace"] == namespace
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": name}]
    profile_namespaces = {
        o["metadata"]["namespace"]
        for o in objects_of(overlay, "Role")
        if o["metadata"]["name"] == "servedeck"
    }
    assert {f["namespace"] for f in grant["spec"]["from"]} == profile_namespaces
    for route in objects_of(overlay, "HTTPRoute"):
        for rule in route["spec"]["rules"]:
            for ref in rule["backendRefs"]:
                service = services[(route["metadata"]["namespace"], ref["name"])]
                assert ref["port"] in {p["port"] for p in service["spec"]["ports"]}
    (reconciler,) = [
        o
        for o in objects_of(overlay, "Deployment")
        if o["metadata"]["name"] == "servedeck-reconciler"
    ]
    env = {e["name"]: e for e in reconciler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (
        env["SERVEDECK_LEADER_ELECTION_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.namespace"
    )
    # The Role the leader election needs names the Lease the reconciler takes.
    (role,) = [
        o
        for o in objects_of(overlay, "Role")
        if o["metadata"]["name"] == "servedeck-leader-election"
    ]
    assert any(
        settings.SERVEDECK_LEADER_ELECTION_LEASE in (r.get("resourceNames") or [])
        for r in role["rules"]
    )


# --- installing into the emulator ---------------------------------------------------------


def applied(kube, overlay: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [kubectl(), "--kubeconfig", str(kube.kubeconfig_path), "apply", "--server-side",
         "--field-manager=kubectl", "--validate=false", "-k", str(DEPLOY / "overlays" / overlay)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_apply_server_side_installs_every_object(kube, overlay):
    done = applied(kube, overlay)
    assert done.returncode == 0, done.stderr
    for obj in render(overlay):
        meta = obj["metadata"]
        live = kube.get(obj["kind"], meta["name"], meta.get("namespace"))
        assert live is not None, (obj["kind"], meta["name"])
        for field in ("spec", "rules", "roleRef", "subjects", "data"):
            assert live.get(field) == obj.get(field), (obj["kind"], meta["name"], field)
    before = versions(kube, overlay)
    again = applied(kube, overlay)
    assert again.returncode == 0, again.stderr
    assert versions(kube, overlay) == before  # a second apply of the same release: no change


def versions(kube, overlay: str) -> dict[tuple[str, str], str]:
    found = {}
    for obj in render(overlay):
        meta = obj["metadata"]
        live = kube.get(obj["kind"], meta["name"], meta.get("namespace"))
        found[(obj["kind"], meta["name"])] = live["metadata"]["resourceVersion"]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_overlay_trusts_a_wide_network_to_forward_client_addresses(overlay):
    """Security review, finding 4: a proxy listed in SERVEDECK_TRUSTED_PROXIES may claim any
    client address; the overlays trust none until the operator names their Gateway
    implementation's pods (production said 10.0.0.0/8: any pod or client in it could)."""
    (config,) = [
        o
        for o in objects_of(overlay, "ConfigMap")
        if o["metadata"]["name"].startswith("servedeck-config")
    ]
    listed = config["data"]["SERVEDECK_TRUSTED_PROXIES"]
    assert listed == "", listed
    install = " ".join((REPO / "docs" / "kubernetes-install.md").read_text().split())
    assert "SERVEDECK_TRUSTED_PROXIES" in install and "pod CIDR" in install


# --- the model servers' network policies (security review, finding 3) ----------------------


def egress_allows(policy: dict, address: str, port: int, protocol: str = "TCP") -> bool:
    """Whether one of an egress policy's rules lets a pod it selects reach address:port (its
    peers by ipBlock; a namespace or pod peer is a pod, never an address outside the cluster)."""
    target = ipaddress.ip_address(address)
    for rule in policy["spec"].get("egress") or []:
        ports = rule.get("ports")
        if ports and not any(
            p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports
        ):
            continue
        peers = rule.get("to")
        if not peers:
            return True  # no `to`: every destination
        for peer in peers:
            block = peer.get("ipBlock")
            if block is None:
                continue
            if target in ipaddress.ip_network(block["cidr"]) and not any(
                target in ipaddress.ip_network(cut) for cut in block.get("except") or []
            ):
                return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_model_servers_are_reached_by_servedeck_only_and_reach_the_internet_only(overlay):
    profile_namespaces = {
        o["metadata"]["namespace"]
        for o in objects_of(overlay, "Role")
        if o["metadata"]["name"] == "servedeck"
    }
    policies = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in objects_of(overlay, "NetworkPolicy")
    }
    made = our_labels("chat")  # what ServeDeck puts on an application's objects
    for namespace in profile_namespaces:
        ingress = policies[(namespace, "servedeck-model-servers-ingress")]["spec"]
        assert ingress["podSelector"]["matchLabels"].items() <= made.items()
        assert ingress["policyTypes"] == ["Ingress"]
        (rule,) = ingress["ingress"]
        (peer,) = rule["from"]
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "servedeck"
        }
        (components,) = peer["podSelector"]["matchExpressions"]
        assert components["key"] == "app.kubernetes.io/component"
        assert sorted(components["values"]) == ["console", "gateway"]
        proxy = policies[(namespace, "servedeck-model-servers-from-api-server")]["spec"]
        assert [set(p) for p in proxy["ingress"][0]["from"]] == [{"ipBlock"}]
        egress = policies[(namespace, "servedeck-model-servers-egress")]
        assert egress["spec"]["policyTypes"] == ["Egress"]
        assert egress["spec"]["podSelector"]["matchLabels"].items() <= made.items()
        for address, port in [
            ("169.254.169.254", 80),  # the cloud metadata service
            ("169.254.169.254", 53),
            ("10.96.0.1", 443),  # a typical Service range: the API server's Service
            ("172.17.0.5", 5432),
            ("192.168.1.10", 6379),
            ("100.64.3.4", 8000),
            ("127.0.0.1", 8000),
        ]:
            assert not egress_allows(egress, address, port), (address, port)
        assert egress_allows(egress, "18.244.20.3", 443)  # huggingface.co, say
        dns = [
            r
            for r in egress["spec"]["egress"]
            if {"port": 53, "protocol": "UDP"} in (r.get("ports") or [])
        ]
        assert dns and all("ipBlock" not in peer for r in dns for peer in r["to"])
