"""The KServe client: an application's rendered objects on a KServe cluster, through the real
`kubernetes` client (kube_api.py), with every failure in plain words (errors.py). The backend
interface on a cluster is ClusterBackend (backend.py), which holds one of these.

    backend = KServeClient.for_cluster(profile.cluster)
    backend.dry_run(objects)          # [] or the server's refusals, one sentence per object
    backend.apply(objects)            # server-side apply as "servedeck", then prune
    backend.observe("llama", "models", organization="acme")  # InferenceService, pods, events

Everything ServeDeck made carries servedeck.io/application=<app> and
servedeck.io/organization=<slug>; those labels are how apply prunes, delete finds, and restart
and observe find the pods (KServe copies the InferenceService's labels onto the predictor's
pods: buildObjectMeta in its predictor.go). Organisations may share a namespace: no verb
changes an existing object that does not carry both (jobs/backends/kubernetes/owner.py).

During a Canary rollout the canary's objects (jobs.render.canary) carry the application label
too, and servedeck.io/track=canary: each verb takes one track, the stable one (no track label)
unless told otherwise, so the stable revision's apply never prunes the canary and its status
never counts the canary's pods; delete without a track takes both.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jobs.kube_names import CANARY_TRACK, about_canary, canary_name, predictor_service, track_of
from jobs.manifest.quantity import parse_quantity
from jobs.render.extras import PREDICTOR_PORT
from jobs.status.endpoints import SERVICE_NAME_LABEL, ready_endpoints

from .cluster_objects import (
    OURS,
    ClusterObjects,
    Discovery,
    Listing,
    WatchEvent,
    app_selector,
    applicable,
    at_version,
    controlled,
    describe,
    event_about,
    identity,
    involved_name,
    listing_of,
    object_name,
    owner_of,
    refusal,
    rendered_kind,
    rendered_track,
    runtime_vllm_version,
)
from .errors import BackendError, Gone, NotFound, Unreachable
from .kinds import (
    CLUSTER_QUEUE,
    CLUSTER_SERVING_RUNTIME,
    CONTAINER_RENDERED,
    ENDPOINT_SLICE,
    EVENT,
    INFERENCE_SERVICE,
    KUBEVIRT,
    LOCAL_MODEL_CACHE,
    LOCAL_MODEL_NODE_GROUP,
    NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    RENDERED,
    SERVING_RUNTIME,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    Kind,
)
from .kube_api import FIELD_MANAGER, ClusterConnection, KubeApi
from .owner import NotOurs, is_ours, not_ours

__all__ = [
    "FIELD_MANAGER",
    "STOP_ANNOTATION",
    "BackendError",
    "ClusterConnection",
    "Discovery",
    "Gone",
    "KServeClient",
    "Listing",
    "NotFound",
    "NotOurs",
    "ClusterObjects",
    "Unreachable",
    "WatchEvent",
]

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 10.0
WATCH_TIMEOUT = 300  # seconds a watch stays open before the caller re-watches
STOP_ANNOTATION = "serving.kserve.io/stop"
# API group -> jobs.models.ADDONS key.
ADDON_GROUPS = {
    "serving.kserve.io": "kserve",
    "keda.sh": "keda",
    "kueue.x-k8s.io": "kueue",
    "gateway.networking.k8s.io": "gatewayApi",
    "cert-manager.io": "certManager",
    "kubevirt.io": "kubevirt",
}


class KServeClient:
    """One cluster's API: the verbs jobs.deploy and the reconciler call."""

    def __init__(
        self,
        connection: ClusterConnection,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.connection = connection
        self.api = KubeApi(connection, connect_timeout, read_timeout)

    @classmethod
    def for_cluster(cls, cluster: Any, **timeouts: float) -> KServeClient:
        """The backend of a jobs.models.Cluster row (kubeconfig + context, or in-cluster)."""
        return cls(ClusterConnection.from_cluster(cluster), **timeouts)

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> KServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- discovery ----------------------------------------------------------------------

    def discover(self) -> Discovery:
        """The Kubernetes version, the add-ons whose API groups are served, Kueue's
        ClusterQueues and the weight cache's node groups (name -> storageLimit in bytes)."""
        version = str(self.api.version().get("gitVersion") or "")
        groups = {
            g.get("name"): (g.get("preferredVersion") or {}).get("version")
            for g in self.api.api_groups().get("groups") or []
        }
        addons = {addon for group, addon in ADDON_GROUPS.items() if group in groups}
        cache = "kserve" in addons and self._serves(LOCAL_MODEL_CACHE)
        if cache:
            addons.add("localModelCache")
        queues: tuple[str, ...] = ()
        if "kueue" in addons:
            queue_kind = at_version(CLUSTER_QUEUE, groups["kueue.x-k8s.io"])
            queues = tuple(
                sorted(object_name(q) for q in self.api.list(queue_kind).get("items") or [])
            )
        node_groups = self._cache_node_groups() if cache else {}
        devices = self._kubevirt_devices() if "kubevirt" in addons else None
        return Discovery(version, frozenset(addons), queues, node_groups, devices)

    def _kubevirt_devices(self) -> tuple[str, ...] | None:
        """The PCI and mediated device names every KubeVirt CR of the cluster permits (there is
        one, in KubeVirt's namespace); None (unknown) when the CR cannot be read."""
        names: set[str] = set()
        try:
            crs = self._list_if_served(KUBEVIRT, None, "")
        except BackendError as error:
            if error.status != 403:
                raise
            return None  # no right to read it: unknown, not "permits none"
        for cr in crs:
            config = ((cr.get("spec") or {}).get("configuration") or {}).get(
                "permittedHostDevices"
            ) or {}
            for key in ("pciHostDevices", "mediatedDevices"):
                for device in config.get(key) or []:
                    name = device.get("resourceName") if isinstance(device, Mapping) else None
                    if isinstance(name, str) and name:
                        names.add(name)
        return tuple(sorted(names))

    def runtime_vllm_version(self, namespace: str) -> str | None:
        """The vLLM version of the cluster's vLLM serving runtime, from its image's tag: the
        namespace's ServingRuntimes first, then the ClusterServingRuntimes; None when no
        runtime's image names a vLLM version (KServe's huggingfaceserver tag is KServe's own
        version, so only an image named vllm, or a tag naming vllm, counts)."""
        for kind, where in ((SERVING_RUNTIME, namespace), (CLUSTER_SERVING_RUNTIME, None)):
            for runtime in sorted(self._list_if_served(kind, where, ""), key=object_name):
                found = runtime_vllm_version(runtime)
                if found:
                    return found
        return None

    def _serves(self, kind: Kind) -> bool:
        try:
            listed = self.api.resources(kind.group, kind.version)
        except BackendError as error:
            if error.status == 404:  # the group does not serve this version
                return False
            raise
        return any(r.get("name") == kind.plural for r in listed.get("resources") or [])

    def _cache_node_groups(self) -> dict[str, int]:
        if not self._serves(LOCAL_MODEL_NODE_GROUP):
            return {}
        groups = {}
        for item in self.api.list(LOCAL_MODEL_NODE_GROUP).get("items") or []:
            limit = (item.get("spec") or {}).get("storageLimit")
            try:
                groups[object_name(item)] = math.ceil(parse_quantity(limit))
            except (ValueError, TypeError):
                continue  # a node group without a readable limit cannot hold a cache
        return groups

    # --- deploy ---------------------------------------------------------------------------

    def dry_run(self, objects: Iterable[Mapping[str, Any]]) -> list[str]:
        """Server-side apply of each object with dryRun=All: [] when the cluster would take
        them all, else one sentence per refused object ("InferenceService models/llama: …").
        Raises BackendError when the cluster cannot be asked (down, or failing itself)."""
        refusals = []
        objects = list(objects)
        if objects:
            app, _, organization = owner_of(objects)
            for obj in objects:
                taken = self._taken(rendered_kind(obj), obj, app, organization)
                if taken is not None:
                    refusals.append(f"{taken.reason}. {taken.next_step}")
        if refusals:
            return refusals  # the server would take them; we would not
        for obj in objects:
            kind = rendered_kind(obj)
            try:
                self.api.apply(kind, applicable(obj), dry_run=True)
            except (Unreachable, Gone):
                raise
            except BackendError as error:
                if error.status is None or error.status >= 500 or error.status == 401:
                    raise
                refusals.append(refusal(describe(kind, obj), error))
        return refusals

    def apply(self, objects: Iterable[Mapping[str, Any]], prune_kinds: Iterable[Kind] = ()) -> None:
        """Server-side apply each object in order (fieldManager servedeck, force: ServeDeck
        owns what it renders), then delete the application's objects the set no longer has
        (of the container kinds, the kinds applied, and `prune_kinds`)."""
        typed = [(rendered_kind(obj), obj) for obj in objects]
        if not typed:
            return
        app, namespace, organization = owner_of([obj for _, obj in typed])
        track = rendered_track([obj for _, obj in typed])
        for kind, obj in typed:  # all checked before any is changed
            taken = self._taken(kind, obj, app, organization)
            if taken is not None:
                raise taken
        for kind, obj in typed:
            self.api.apply(kind, applicable(obj))
        keep = {identity(kind, obj) for kind, obj in typed}
        kinds = (*(kind for kind, _ in typed), *prune_kinds)
        for kind, obj in reversed(self._ours(app, namespace, organization, kinds, track)):
            if identity(kind, obj) not in keep:
                self._delete_quietly(kind, obj)

    def delete(
        self,
        app: str,
        namespace: str,
        *,
        organization: str,
        kinds: Iterable[Kind] = (),
        track: str | None = None,
    ) -> None:
        """Delete everything rendered for the organisation's application (its cluster-scoped
        weight cache too; of the container kinds and `kinds`); Kubernetes' garbage collector
        then removes the Deployments and pods (KubeVirt's the instances). Objects of the same
        name that are not this application's stay. `track`: only that track's objects (a
        Canary rollout's canary: CANARY_TRACK); None: both."""
        for kind, obj in reversed(self._ours(app, namespace, organization, tuple(kinds), track)):
            self._delete_quietly(kind, obj)

    def restart(self, app: str, namespace: str, *, organization: str) -> int:
        """Replace the replicas: delete the application's pods, their Deployment makes new
        ones; settings, storage and the weight cache stay. Returns how many were deleted."""
        self._require_isvc(app, namespace, organization)
        pods = self._pods(app, namespace, organization)
        for pod in pods:
            self._delete_quietly(POD, pod)
        return len(pods)

    def stop(self, app: str, namespace: str, *, organization: str) -> None:
        """KServe's stop annotation: the replicas go and free their GPUs, the configuration
        stays. ServeDeck's apply does not own the annotation, so a redeploy keeps it."""
        self._annotate(app, namespace, organization, "true")

    def start(self, app: str, namespace: str, *, organization: str) -> None:
        """Remove the stop annotation: KServe brings the replicas back."""
        self._annotate(app, namespace, organization, None)

    def _annotate(self, app: str, namespace: str, organization: str, value: str | None) -> None:
        isvc = self._require_isvc(app, namespace, organization)
        # The resourceVersion makes the patch conditional: it fails if the object was replaced
        # (by anyone) since it was checked.
        version = (isvc.get("metadata") or {}).get("resourceVersion")
        meta: dict[str, Any] = {"annotations": {STOP_ANNOTATION: value}}
        if version:
            meta["resourceVersion"] = version
        self.api.merge_patch(INFERENCE_SERVICE, app, namespace, {"metadata": meta})

    def _require_isvc(self, app: str, namespace: str, organization: str) -> dict:
        """The application's InferenceService; NotOurs when that name is someone else's."""
        isvc = self.api.get(INFERENCE_SERVICE, app, namespace)
        refused = not_ours(
            INFERENCE_SERVICE.describe(namespace, app),
            isvc,
            app,
            organization,
            f"-n {namespace} {INFERENCE_SERVICE.plural} {app}",
        )
        if refused is not None:
            raise refused
        return isvc

    def _taken(
        self, kind: Kind, obj: Mapping[str, Any], app: str, organization: str
    ) -> NotOurs | None:
        """Whether an object of that kind and name exists that is not this application's."""
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") if kind.namespaced else None
        try:
            live = self.api.get(kind, name, namespace)
        except NotFound:
            return None
        except BackendError as error:
            if error.status == 404:  # the kind is not served: the apply will say so
                return None
            raise
        where = f"-n {namespace} {kind.plural} {name}" if namespace else f"{kind.plural} {name}"
        return not_ours(kind.describe(namespace, name), live, app, organization, where)

    def _ours(
        self,
        app: str,
        namespace: str,
        organization: str,
        kinds: Iterable[Kind] = (),
        track: str | None = None,
    ) -> list[tuple[Kind, dict]]:
        """The application's objects on the cluster of the container kinds and `kinds`, kind
        by kind in apply order; a kind the cluster does not serve has none. An object a
        controller owns (KServe's Service, KubeVirt's instances) is its owner's, not ours.
        `track`: only that track's ("" the stable revision's); None: every one."""
        wanted = {*CONTAINER_RENDERED, *kinds}
        found = []
        for kind in (k for k in RENDERED if k in wanted):
            if kind.namespaced:
                selector = app_selector(app, organization=organization)
                listed = self._list_if_served(kind, namespace, selector)
            else:
                selector = app_selector(app, namespace, organization)
                listed = self._list_if_served(kind, None, selector)
            found += [
                (kind, obj)
                for obj in listed
                if is_ours(obj, app, organization)
                and not controlled(obj)
                and (track is None or track_of(obj) == track)
            ]
        return found

    def _list_if_served(self, kind: Kind, namespace: str | None, selector: str) -> list[dict]:
        try:
            return self.api.list(kind, namespace, selector).get("items") or []
        except BackendError as error:
            if error.status == 404:  # the add-on is not installed: nothing of this kind
                return []
            raise

    def _delete_quietly(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with contextlib.suppress(NotFound):  # already gone: what we wanted
            self.api.delete(kind, meta["name"], meta.get("namespace") if kind.namespaced else None)

    # --- observing ------------------------------------------------------------------------

    def observe(
        self, app: str, namespace: str, *, organization: str, track: str = ""
    ) -> ClusterObjects:
        """The InferenceService (None when absent, or when that name is someone else's), its
        pods, and the namespace's events about them (the InferenceService, its pods,
        Deployments and ReplicaSets, Kueue workloads). `track` CANARY_TRACK: a Canary
        rollout's canary (<app>-canary) instead of the stable revision."""
        name = canary_name(app) if track == CANARY_TRACK else app
        try:
            isvc: dict | None = self.api.get(INFERENCE_SERVICE, name, namespace)
        except NotFound:
            isvc = None
        if isvc is not None and not (is_ours(isvc, app, organization) and track_of(isvc) == track):
            isvc = None  # another application's status is not this one's
        pods = self._pods(app, namespace, organization, track)
        names = {object_name(p) for p in pods}
        events = self.api.list(EVENT, namespace).get("items") or []
        if isvc is None:  # events named after the app would be about the other's objects
            return ClusterObjects(None, pods, [e for e in events if event_about(e, "", names)])
        # The stable revision's events are not about the canary's objects, named after it.
        about = [e for e in events if event_about(e, name, names)]
        if track != CANARY_TRACK:
            about = [e for e in about if not about_canary(involved_name(e), app)]
        return ClusterObjects(isvc, pods, about)

    def _pods(self, app: str, namespace: str, organization: str, track: str = "") -> list[dict]:
        """The pods of one track of the application (KServe copies the labels onto them)."""
        selector = app_selector(app, organization=organization)
        pods = self.api.list(POD, namespace, selector).get("items") or []
        return [pod for pod in pods if track_of(pod) == track]

    def ready_endpoints(self, service: str, namespace: str) -> tuple[str, ...]:
        """The ready endpoints of one Service, from its EndpointSlices (jobs.status.endpoints):
        a Canary rollout's canary, which the reconciler's watches do not follow."""
        selector = f"{SERVICE_NAME_LABEL}={service}"
        slices = self.api.list(ENDPOINT_SLICE, namespace, selector).get("items") or []
        return ready_endpoints(slices)

    def replica_pods(self, app: str, namespace: str, *, organization: str) -> list[dict]:
        """The application's pods (its replicas: the stable revision's), oldest first."""
        pods = self._pods(app, namespace, organization)
        return sorted(
            pods,
            key=lambda p: (
                (p.get("metadata") or {}).get("creationTimestamp") or "",
                object_name(p),
            ),
        )

    def pod_log(
        self,
        pod: str,
        namespace: str,
        container: str | None,
        tail_lines: int,
        limit_bytes: int,
        timestamps: bool = False,
    ) -> bytes:
        """A pod's last log lines, bounded (the caller picked the pod from replica_pods)."""
        return self.api.pod_log(pod, namespace, container, tail_lines, limit_bytes, timestamps)

    def predictor_get(
        self,
        app: str,
        namespace: str,
        path: str,
        limit_bytes: int,
        timeout: float,
        deadline: float,
    ) -> bytes:
        """GET <path> of the application's predictor Service (its ready replicas: KServe's, or
        the leaders of its virtual machines) through the API server's service proxy, whole
        within about `deadline` seconds (KubeApi.service_proxy_get)."""
        service = f"{predictor_service(app)}:{PREDICTOR_PORT}"
        return self.api.service_proxy_get(service, namespace, path, limit_bytes, timeout, deadline)

    def node_label_values(self, label: str, limit: int, seconds: float) -> list[str]:
        """The value of `label` on the nodes that carry it: one list call of at most `limit`
        nodes (never a second page), answered within `seconds` or not at all."""
        timeout = (min(self.api.connect_timeout, seconds), seconds)
        listed = self.api.list(NODE, None, label, limit=limit, _request_timeout=timeout)
        items = (listed.get("items") or [])[:limit]
        values = [((n.get("metadata") or {}).get("labels") or {}).get(label) for n in items]
        return [str(v) for v in values if v]

    def list_inference_services(self, namespace: str | None = None) -> Listing:
        """ServeDeck's InferenceServices (every application's), in one namespace or all."""
        return listing_of(self.api.list(INFERENCE_SERVICE, namespace, OURS))

    def list_pods(self, namespace: str | None = None) -> Listing:
        """The pods of ServeDeck's applications, in one namespace or all."""
        return listing_of(self.api.list(POD, namespace, OURS))

    def list_virtual_machines(self, namespace: str | None = None) -> Listing:
        """ServeDeck's KubeVirt VirtualMachines (every application's)."""
        return listing_of(self.api.list(VIRTUAL_MACHINE, namespace, OURS))

    def list_virtual_machine_instances(self, namespace: str | None = None) -> Listing:
        """The instances of ServeDeck's VirtualMachines (they carry the template's labels)."""
        return listing_of(self.api.list(VIRTUAL_MACHINE_INSTANCE, namespace, OURS))

    def list_persistent_volume_claims(self, namespace: str | None = None) -> Listing:
        """ServeDeck's PersistentVolumeClaims: the weight volumes of virtual machines."""
        return listing_of(self.api.list(PERSISTENT_VOLUME_CLAIM, namespace, OURS))

    def watch_persistent_volume_claims(
        self, namespace=None, resource_version=None, timeout_seconds=60
    ):
        kind = PERSISTENT_VOLUME_CLAIM
        return self._watch(kind, namespace, OURS, resource_version, timeout_seconds)

    def watch_virtual_machines(self, namespace=None, resource_version=None, timeout_seconds=60):
        return self._watch(VIRTUAL_MACHINE, namespace, OURS, resource_version, timeout_seconds)

    def watch_virtual_machine_instances(
        self, namespace=None, resource_version=None, timeout_seconds=60
    ):
        kind = VIRTUAL_MACHINE_INSTANCE
        return self._watch(kind, namespace, OURS, resource_version, timeout_seconds)

    def list_events(self, namespace: str | None = None) -> Listing:
        """Every event of the namespace (events carry no labels: match involvedObject)."""
        return listing_of(self.api.list(EVENT, namespace))

    def list_endpoint_slices(self, namespace: str | None = None) -> Listing:
        """Every EndpointSlice of the namespace (they carry their Service's name, not ours):
        the predictor Services' ready pods, which the gateway routes across."""
        return listing_of(self.api.list(ENDPOINT_SLICE, namespace))

    def watch_endpoint_slices(
        self,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT,
    ) -> Iterator[WatchEvent]:
        """Changes to the namespace's EndpointSlices; as watch_inference_services."""
        return self._watch(ENDPOINT_SLICE, namespace, None, resource_version, timeout_seconds)

    def watch_inference_services(
        self,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT,
    ) -> Iterator[WatchEvent]:
        """Changes to ServeDeck's InferenceServices after resource_version, until the server
        ends the watch (timeout_seconds). Raises Gone when resource_version is too old."""
        return self._watch(INFERENCE_SERVICE, namespace, OURS, resource_version, timeout_seconds)

    def watch_pods(
        self,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT,
    ) -> Iterator[WatchEvent]:
        """Changes to the pods of ServeDeck's applications; as watch_inference_services."""
        return self._watch(POD, namespace, OURS, resource_version, timeout_seconds)

    def watch_events(
        self,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT,
    ) -> Iterator[WatchEvent]:
        """New and updated events of the namespace; as watch_inference_services."""
        return self._watch(EVENT, namespace, None, resource_version, timeout_seconds)

    def _watch(
        self,
        kind: Kind,
        namespace: str | None,
        selector: str | None,
        resource_version: str | None,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent]:
        for event in self.api.watch(kind, namespace, selector, resource_version, timeout_seconds):
            obj = event.get("object") or {}
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            yield WatchEvent(str(event.get("type")), obj, rv)
