"""The RBAC in deploy/ is exactly what the code needs: the Kubernetes emulator grants the
console's service account the rules read from the rendered production overlay and nothing else,
and every verb of the console and the reconciler works; take any one rule away and a named
verb fails. The docs' list of rules is checked against the same files."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest

from jobs.backends.kubernetes.kserve_client import KServeClient
from jobs.backends.kubernetes.kube_api import ClusterConnection
from jobs.machine_catalog import default_machine_catalog
from jobs.manifest import ManifestContext, ProfileFacts, parse
from jobs.models import ADDONS
from jobs.reconciler.leader import LeaderElector, LeaseTimes
from jobs.reconciler.watching import KINDS
from jobs.render import APP_LABEL, RenderTarget, render
from jobs.render.common import ORGANIZATION_LABEL
from tests.deploy.manifests import REPO, Rule, granted_rules, grants
from tests.deploy.manifests import render as render_overlay
from tests.fakes.kube import KSERVE_ALPHA, KubeEmulator

NS = "models"
ORG = "acme"
GIB = 2**30
COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"
DEVICE = "nvidia.com/AD104GL_L4"
RULES = granted_rules(render_overlay("production"))


# --- what the scenario deploys ---------------------------------------------------------------


def rendered(name: str, model: dict, domain: bool = False, asleep: bool = False) -> list[dict]:
    """What jobs.render makes for a model of acme on a cluster with every add-on."""
    profile = ProfileFacts(
        name="prod",
        namespace=NS,
        machine_catalog=tuple(default_machine_catalog()),
        addons=frozenset(ADDONS),
        queues=("gpu-queue",),
        cache_node_groups={"gpu-l4": 500 * GIB},
    )
    ctx = ManifestContext(
        profiles={"prod": profile},
        verified_domains=frozenset({"models.example.com"}),
        access_policies=frozenset({"partners"}),
    )
    spec: dict = {"name": name, "profileName": "prod", "source": {"type": "Model", "model": model}}
    if domain:
        spec["access"] = {
            "exposure": "Domain",
            "domain": "models.example.com",
            "accessPolicy": "partners",
        }
    result = parse({"apiVersion": "servedeck.io/v1", "kind": "Application", "spec": spec}, ctx)
    assert result.ok, [str(p) for p in result.refusals]
    target = RenderTarget(
        namespace=NS,
        machine_catalog=profile.machine_catalog,
        addons=frozenset(ADDONS),
        organization=ORG,
        organization_name="Acme",
    )
    return render(result.manifest, target, revision=1, asleep=asleep)


def chat() -> list[dict]:
    """A GPU chat model with the weight cache, exposed on a domain: a LocalModelCache (cluster
    scope), an InferenceService and an HTTPRoute."""
    model = {
        "uri": f"hf://Qwen/Qwen3-8B:{COMMIT}",
        "resources": {"accelerator": {"gpu": {"model": "l4", "countPerReplica": 1}}},
        "cache": {"enabled": True, "size": "20Gi"},
    }
    return rendered("llama", model, domain=True)


def sleepy(asleep: bool) -> list[dict]:
    """A chat model with minReplicas 0, awake or asleep (its predictor scaled to zero)."""
    model = {"uri": f"hf://Qwen/Qwen3-8B:{COMMIT}", "scaling": {"minReplicas": 0}}
    return rendered("sleepy", model, asleep=asleep)


def speech() -> list[dict]:
    """Speech to text: ServeDeck's own ServingRuntime beside the InferenceService."""
    return rendered("speech", {"uri": "hf://nvidia/parakeet-tdt-0.6b-v3"})


def cluster_objects() -> list[dict]:
    """What discovery reads and the verbs act on, put there by the cluster's own controllers."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
         "metadata": {"name": "gpu-queue"}},
        {"apiVersion": KSERVE_ALPHA, "kind": "LocalModelNodeGroup", "metadata": {"name": "gpu-l4"},
         "spec": {"storageLimit": "500Gi", "persistentVolumeSpec": {}}},
        {"apiVersion": KSERVE_ALPHA, "kind": "ClusterServingRuntime",
         "metadata": {"name": "kserve-vllmserver"},
         "spec": {"supportedModelFormats": [{"name": "vllm"}],
                  "containers": [{"name": "kserve-container",
                                  "image": "vllm/vllm-openai:v0.11.0"}]}},
        {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
         "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
         "spec": {"configuration": {"permittedHostDevices": {
             "pciHostDevices": [{"pciVendorSelector": "10DE:27B8", "resourceName": DEVICE}]}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "llama-predictor-7d9f-aaaaa", "namespace": NS,
                      "generateName": "llama-predictor-7d9f-",
                      "labels": {APP_LABEL: "llama", ORGANIZATION_LABEL: ORG},
                      "ownerReferences": [{"kind": "ReplicaSet", "name": "llama-predictor-7d9f"}]},
         "spec": {"containers": [{"name": "kserve-container", "image": "kserve/huggingface"}]},
         "status": {"phase": "Running"}},
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "gpu-l4-0",
                      "labels": {"topology.kubernetes.io/region": "us-east-2"}}},
        {"apiVersion": "v1", "kind": "Event",
         "metadata": {"name": "llama.1", "namespace": NS},
         "involvedObject": {"kind": "InferenceService", "name": "llama", "namespace": NS},
         "reason": "Created", "message": "created", "type": "Normal"},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "llama-predictor-x7k2p", "namespace": NS,
                      "labels": {"kubernetes.io/service-name": "llama-predictor"}},
         "addressType": "IPv4", "ports": [{"port": 8080}],
         "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": True}}]},
    ]  # fmt: skip


# --- the verbs -------------------------------------------------------------------------------


class Scenario:
    """Every verb of the console and the reconciler against the emulator, in the order a
    model's life runs them; each verb's failure is kept under its name, and the next verbs
    still run."""

    def __init__(self, kube: KubeEmulator, client: KServeClient, metrics_url: str) -> None:
        self.kube = kube
        self.client = client
        self.metrics_url = metrics_url
        self.failed: dict[str, str] = {}

    def run(self) -> dict[str, str]:
        for obj in cluster_objects():
            self.kube.put(obj)
        self.kube.set_pod_log(NS, "llama-predictor-7d9f-aaaaa", "loaded\n")
        self.kube.serve_service(NS, "llama-predictor", self.metrics_url)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("discover", self.discover),
            ("vLLM version", self.vllm_version),
            ("dry run", self.dry_run),
            ("nodes' region", self.node_regions),
            ("apply", self.apply),
            ("apply again", self.apply),
            ("observe", self.observe),
            ("reconciler watches", self.watches),
            ("logs", self.logs),
            ("metrics through the service proxy", self.metrics),
            ("restart", self.restart),
            ("stop", lambda: self.client.stop("llama", NS, organization=ORG)),
            ("start", lambda: self.client.start("llama", NS, organization=ORG)),
            ("sleep (scale to zero)", lambda: self.client.apply(sleepy(asleep=True))),
            ("wake", lambda: self.client.apply(sleepy(asleep=False))),
            ("leader election", self.leader_election),
            ("delete", self.delete),
        ]
        for name, step in steps:
            try:
                step()
            except Exception as error:  # a refused verb: kept by name, the next ones run
                self.failed[name] = f"{type(error).__name__}: {error}"
        return self.failed

    def discover(self) -> None:
        found = self.client.discover()
        assert found.queues == ("gpu-queue",), found
        assert found.cache_node_groups == {"gpu-l4": 500 * GIB}, found
        assert found.kubevirt_devices == (DEVICE,), "the KubeVirt CR was not read"

    def vllm_version(self) -> None:
        assert self.client.runtime_vllm_version(NS) == "0.11.0"

    def dry_run(self) -> None:
        assert self.client.dry_run(chat()) == []
        assert self.client.dry_run(speech()) == []

    def node_regions(self) -> None:
        regions = self.client.node_label_values("topology.kubernetes.io/region", 100, 5.0)
        assert regions == ["us-east-2"], regions

    def apply(self) -> None:
        self.client.apply(chat())
        self.client.apply(speech())
        self.client.apply(sleepy(asleep=False))

    def observe(self) -> None:
        seen = self.client.observe("llama", NS, organization=ORG)
        assert seen.isvc is not None and seen.pods and seen.events, seen

    def watches(self) -> None:
        """What each stream of a ClusterFollower does: list, then watch (here until the first
        event)."""
        for kind in KINDS:
            listing = getattr(self.client, f"list_{kind}")(NS)
            assert listing.items, kind
            # From "0": the emulator sends what it holds at once, as ADDED events.
            events = getattr(self.client, f"watch_{kind}")(NS, "0", timeout_seconds=5)
            try:
                next(iter(events))
            finally:
                events.close()

    def logs(self) -> None:
        (pod,) = self.client.replica_pods("llama", NS, organization=ORG)
        name = pod["metadata"]["name"]
        assert self.client.pod_log(name, NS, "kserve-container", 10, 10_000) == b"loaded\n"

    def metrics(self) -> None:
        body = self.client.predictor_get("llama", NS, "metrics", 10_000, 5, 5)
        assert b"vllm:num_requests_waiting" in body

    def restart(self) -> None:
        assert self.client.restart("llama", NS, organization=ORG) == 1

    def leader_election(self) -> None:
        elector = LeaderElector(
            self.client.connection, "servedeck", candidate="reconciler-0", times=LeaseTimes()
        )
        elector.api = self.client.api  # the client made already: no second connection
        assert elector.try_acquire_or_renew(), "the Lease was not created"
        assert elector.try_acquire_or_renew(), "the Lease was not renewed"

    def delete(self) -> None:
        for app in ("llama", "speech", "sleepy"):
            self.client.delete(app, NS, organization=ORG)
        left = [o for kind in ("InferenceService", "HTTPRoute", "LocalModelCache",
                               "ServingRuntime") for o in self.kube.objects(kind)]  # fmt: skip
        assert not left, [o["metadata"]["name"] for o in left]


@pytest.fixture(scope="module")
def metrics_page():
    """vLLM's /metrics page, which the service proxy reaches."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b"vllm:num_requests_waiting 0\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def client(kube_emulator):
    """One API client for the module: the emulator keeps its address for the session."""
    connection = ClusterConnection(
        "prod",
        str(kube_emulator.kubeconfig_path),
        "emulator",
        kubeconfig_dir=str(kube_emulator.directory),
    )
    with KServeClient(connection) as made:
        yield made


def scenario(kube, client, metrics_page, rules: list[Rule]) -> dict[str, str]:
    kube.rbac(*grants(rules))
    return Scenario(kube, client, metrics_page).run()


# --- the tests -------------------------------------------------------------------------------


def test_the_rules_in_deploy_are_enough_for_every_verb(kube, client, metrics_page):
    failed = scenario(kube, client, metrics_page, RULES)
    assert failed == {}, failed
    assert kube.refusals == []


def test_without_rbac_rules_every_verb_is_refused(kube, client, metrics_page):
    """The emulator's RBAC holds: with a rule nobody needs, every verb fails."""
    failed = scenario(kube, client, metrics_page, [Rule("elsewhere", "", "pods", "get")])
    assert set(failed) >= {"discover", "dry run", "apply", "observe", "reconciler watches",
                           "logs", "metrics through the service proxy", "restart", "stop",
                           "start", "leader election", "delete"}  # fmt: skip


# Each rule, and a verb that fails without it (the scenario may name more).
NEEDED_BY = {
    "cluster:kueue.x-k8s.io/clusterqueues:list": "discover",
    "cluster:serving.kserve.io/localmodelnodegroups:list": "discover",
    "cluster:serving.kserve.io/clusterservingruntimes:list": "vLLM version",
    "cluster:kubevirt.io/kubevirts:list": "discover",
    "cluster:core/nodes:list": "nodes' region",
    "cluster:serving.kserve.io/localmodelcaches:get": "dry run",
    "cluster:serving.kserve.io/localmodelcaches:list": "apply",
    "cluster:serving.kserve.io/localmodelcaches:create": "apply",
    "cluster:serving.kserve.io/localmodelcaches:patch": "apply",
    "cluster:serving.kserve.io/localmodelcaches:delete": "delete",
    "models:serving.kserve.io/inferenceservices:get": "dry run",
    "models:serving.kserve.io/inferenceservices:list": "reconciler watches",
    "models:serving.kserve.io/inferenceservices:watch": "reconciler watches",
    "models:serving.kserve.io/inferenceservices:create": "apply",
    "models:serving.kserve.io/inferenceservices:patch": "stop",
    "models:serving.kserve.io/inferenceservices:delete": "delete",
    "models:serving.kserve.io/servingruntimes:get": "dry run",
    "models:serving.kserve.io/servingruntimes:list": "vLLM version",
    "models:serving.kserve.io/servingruntimes:create": "apply",
    "models:serving.kserve.io/servingruntimes:patch": "dry run",
    "models:serving.kserve.io/servingruntimes:delete": "delete",
    "models:gateway.networking.k8s.io/httproutes:get": "dry run",
    "models:gateway.networking.k8s.io/httproutes:list": "apply",
    "models:gateway.networking.k8s.io/httproutes:create": "apply",
    "models:gateway.networking.k8s.io/httproutes:patch": "dry run",
    "models:gateway.networking.k8s.io/httproutes:delete": "delete",
    "models:core/pods:list": "observe",
    "models:core/pods:watch": "reconciler watches",
    "models:core/pods:delete": "restart",
    "models:core/pods/log:get": "logs",
    "models:core/events:list": "observe",
    "models:core/events:watch": "reconciler watches",
    "models:core/services/proxy:get": "metrics through the service proxy",
    "models:discovery.k8s.io/endpointslices:list": "reconciler watches",
    "models:discovery.k8s.io/endpointslices:watch": "reconciler watches",
    "servedeck:coordination.k8s.io/leases:create": "leader election",
    "servedeck:coordination.k8s.io/leases[servedeck-reconciler]:get": "leader election",
    "servedeck:coordination.k8s.io/leases[servedeck-reconciler]:update": "leader election",
}


def test_every_rule_in_deploy_is_named_here():
    assert sorted(map(str, RULES)) == sorted(NEEDED_BY)


@pytest.mark.parametrize("rule", RULES, ids=str)
def test_each_rule_is_needed(kube, client, metrics_page, rule):
    failed = scenario(kube, client, metrics_page, [r for r in RULES if r != rule])
    named = NEEDED_BY[str(rule)]
    assert named in failed, f"without {rule}, {named} still works (failed: {sorted(failed)})"
    refused = {(r.verb, r.group, r.resource) for r in kube.refusals}
    assert (rule.verb, rule.group, rule.resource) in refused, kube.refusals


# --- the docs say the same ---------------------------------------------------------------


DOCS = REPO / "docs" / "kubernetes-install.md"
PLACES = {"cluster-wide": "cluster", "each profile namespace": "models", "servedeck": "servedeck"}


def documented_rules(text: str) -> list[str]:
    """The rows of the install page's rules table (where, API group, resources, names, verbs),
    one entry per resource and verb, as Rule's str() says them."""
    found = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] not in PLACES:
            continue
        where, group, resources, names, verbs = cells
        group = group.strip("`").strip('"') or "core"
        names = ",".join(re.findall(r"`([^`]+)`", names))
        limited = f"[{names}]" if names else ""
        for resource in re.findall(r"`([^`]+)`", resources):
            for verb in re.findall(r"`([a-z]+)`", verbs):
                found.append(f"{PLACES[where]}:{group}/{resource}{limited}:{verb}")
    return sorted(found)


def test_the_install_page_lists_exactly_the_rules_in_deploy():
    assert documented_rules(DOCS.read_text()) == sorted(map(str, RULES))
