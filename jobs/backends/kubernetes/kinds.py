"""The Kubernetes resources the Kubernetes backend reads and writes, and what to install when
the cluster does not serve one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str  # "" for the core API
    version: str
    plural: str
    namespaced: bool
    provider: str  # what serves it, for "install …" next steps
    singular: str = ""  # core kinds: the name CoreV1Api's methods use ("pod")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The name RBAC rules and API errors use: inferenceservices.serving.kserve.io."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def describe(self, namespace: str | None, name: str | None) -> str:
        """How an error names the object: "InferenceService models/llama"."""
        if name is None:
            where = f"in namespace {namespace}" if namespace else "in all namespaces"
            return f"{self.kind} objects {where}" if self.namespaced else f"{self.kind} objects"
        return (
            f"{self.kind} {namespace}/{name}"
            if self.namespaced and namespace
            else (f"{self.kind} {name}")
        )


KSERVE = "KServe"
INFERENCE_SERVICE = Kind(
    "InferenceService", "serving.kserve.io", "v1beta1", "inferenceservices", True, KSERVE
)
SERVING_RUNTIME = Kind(
    "ServingRuntime", "serving.kserve.io", "v1alpha1", "servingruntimes", True, KSERVE
)
CLUSTER_SERVING_RUNTIME = Kind(
    "ClusterServingRuntime",
    "serving.kserve.io",
    "v1alpha1",
    "clusterservingruntimes",
    False,
    KSERVE,
)
LOCAL_MODEL_CACHE = Kind(
    "LocalModelCache",
    "serving.kserve.io",
    "v1alpha1",
    "localmodelcaches",
    False,
    "KServe's weight cache (LocalModelCache CRDs, KServe 0.15 or later)",
)
LOCAL_MODEL_NODE_GROUP = Kind(
    "LocalModelNodeGroup",
    "serving.kserve.io",
    "v1alpha1",
    "localmodelnodegroups",
    False,
    "KServe's weight cache (LocalModelCache CRDs, KServe 0.15 or later)",
)
HTTP_ROUTE = Kind(
    "HTTPRoute", "gateway.networking.k8s.io", "v1", "httproutes", True, "the Gateway API CRDs"
)
CLUSTER_QUEUE = Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta1", "clusterqueues", False, "Kueue")
POD = Kind("Pod", "", "v1", "pods", True, "Kubernetes", singular="pod")
EVENT = Kind("Event", "", "v1", "events", True, "Kubernetes", singular="event")
SERVICE = Kind("Service", "", "v1", "services", True, "Kubernetes", singular="service")
# Read for their region (topology.kubernetes.io/region) only: cluster-scoped.
NODE = Kind("Node", "", "v1", "nodes", False, "Kubernetes", singular="node")
# The predictor Service's ready pods: the replicas the gateway routes across.
ENDPOINT_SLICE = Kind(
    "EndpointSlice", "discovery.k8s.io", "v1", "endpointslices", True, "Kubernetes"
)
# GET through the API server's service proxy: RBAC names it services/proxy.
SERVICE_PROXY = Kind("Service", "", "v1", "services/proxy", True, "Kubernetes")
PERSISTENT_VOLUME_CLAIM = Kind(
    "PersistentVolumeClaim",
    "",
    "v1",
    "persistentvolumeclaims",
    True,
    "Kubernetes",
    singular="persistent_volume_claim",
)
CONFIG_MAP = Kind("ConfigMap", "", "v1", "configmaps", True, "Kubernetes", singular="config_map")
NETWORK_POLICY = Kind(
    "NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies", True, "Kubernetes"
)
# The reconciler's leader election (jobs/reconciler/leader.py), in the console's own namespace.
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", True, "Kubernetes")
KUBEVIRT_PROVIDER = "KubeVirt"
VIRTUAL_MACHINE = Kind(
    "VirtualMachine", "kubevirt.io", "v1", "virtualmachines", True, KUBEVIRT_PROVIDER
)
VIRTUAL_MACHINE_INSTANCE = Kind(
    "VirtualMachineInstance",
    "kubevirt.io",
    "v1",
    "virtualmachineinstances",
    True,
    KUBEVIRT_PROVIDER,
)
KUBEVIRT = Kind("KubeVirt", "kubevirt.io", "v1", "kubevirts", True, KUBEVIRT_PROVIDER)

# What render() makes, in the order they are applied; deleted in the reverse order, so the
# route stops sending traffic before its InferenceService (or its machines) goes, and the
# machines go before the volumes they use.
RENDERED = (
    LOCAL_MODEL_CACHE,
    SERVING_RUNTIME,
    PERSISTENT_VOLUME_CLAIM,
    CONFIG_MAP,
    SERVICE,
    NETWORK_POLICY,
    INFERENCE_SERVICE,
    VIRTUAL_MACHINE,
    HTTP_ROUTE,
)
# What an application in containers has (all ServeDeck looks for unless told more): listing
# the KubeVirt application's kinds too would need rights a KServe-only console lacks.
CONTAINER_RENDERED = (LOCAL_MODEL_CACHE, SERVING_RUNTIME, INFERENCE_SERVICE, HTTP_ROUTE)
_BY_TYPE = {(k.api_version, k.kind): k for k in RENDERED}


def kind_of(obj: Mapping[str, Any]) -> Kind | None:
    """The rendered kind of an object, or None for one ServeDeck does not render."""
    return _BY_TYPE.get((obj.get("apiVersion"), obj.get("kind")))
