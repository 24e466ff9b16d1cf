"""What the KServe client (kserve_client.py) reads and sends, as plain values: the results of
its verbs (Discovery, ClusterObjects, Listing, WatchEvent) and the pure readings of objects it
makes them from (whose application, track and kind an object is, what an apply sends, which
events concern an application). No API calls here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.kube_names import track_of
from jobs.machine_catalog import vllm_version_of_image
from jobs.render.common import APP_LABEL, NAMESPACE_LABEL, ORGANIZATION_LABEL

from .errors import BackendError
from .kinds import Kind, kind_of

# Set by the API server; sending them back would make an apply a compare-and-swap.
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
OURS = APP_LABEL  # as a selector, "the label exists": every ServeDeck application's objects


@dataclass(frozen=True)
class Discovery:
    """What the cluster offers, in the words of jobs.models.Cluster."""

    version: str
    addons: frozenset[str]
    queues: tuple[str, ...] = ()
    cache_node_groups: dict[str, int] = field(default_factory=dict)
    # KubeVirt's permittedHostDevices: the resource names a virtual machine may pass through;
    # None when unknown (no KubeVirt, or its CR could not be read), never taken for "none".
    kubevirt_devices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ClusterObjects:
    """The raw objects jobs.status.derive_status reads for one application."""

    isvc: dict | None
    pods: list[dict]
    events: list[dict]


@dataclass(frozen=True)
class Listing:
    """A list's items and the resourceVersion to start watching from."""

    items: list[dict]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    """ADDED, MODIFIED, DELETED, or BOOKMARK (object has only metadata.resourceVersion)."""

    type: str
    object: dict
    resource_version: str


def app_selector(app: str, namespace: str | None = None, organization: str | None = None) -> str:
    # Cluster-scoped objects say which namespace's application they belong to: names are
    # unique per namespace only. Organisations may share the namespace.
    selector = f"{APP_LABEL}={app}"
    if organization:
        selector += f",{ORGANIZATION_LABEL}={organization}"
    return f"{selector},{NAMESPACE_LABEL}={namespace}" if namespace else selector


def rendered_kind(obj: Mapping[str, Any]) -> Kind:
    kind = kind_of(obj)
    if kind is None:
        raise BackendError(
            f"ServeDeck does not apply {obj.get('apiVersion')} {obj.get('kind')} objects",
            "Apply only what jobs.render made: InferenceService, ServingRuntime, "
            "LocalModelCache and HTTPRoute; VirtualMachine, Service, PersistentVolumeClaim, "
            "ConfigMap and NetworkPolicy for virtual machines.",
        )
    return kind


def controlled(obj: Mapping[str, Any]) -> bool:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(o, Mapping) and o.get("controller") is True for o in owners)


def applicable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as an apply sends it: no status, no server-set metadata."""
    body = {k: v for k, v in obj.items() if k != "status"}
    meta = dict(body.get("metadata") or {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    body["metadata"] = meta
    return body


def rendered_track(objects: list[Mapping[str, Any]]) -> str:
    """The one track a rendered set belongs to ("" the stable revision's)."""
    tracks = {track_of(obj) for obj in objects}
    if len(tracks) != 1:
        raise BackendError(
            f"The objects to apply mix a Canary rollout's tracks ({sorted(tracks)})",
            "Apply the stable revision's objects and the canary's (jobs.render.canary) apart.",
        )
    return tracks.pop()


def owner_of(objects: list[Mapping[str, Any]]) -> tuple[str, str, str]:
    """The application, namespace and organisation a rendered set belongs to (its labels
    say)."""
    apps, namespaces, organizations = set(), set(), set()
    for obj in objects:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        apps.add(labels.get(APP_LABEL))
        namespaces.add(meta.get("namespace") or labels.get(NAMESPACE_LABEL))
        organizations.add(labels.get(ORGANIZATION_LABEL))
    if any(len(found) != 1 or None in found for found in (apps, namespaces, organizations)):
        raise BackendError(
            "The objects to apply do not belong to one application of one organisation in one "
            f"namespace (applications {sorted(map(str, apps))}, namespaces "
            f"{sorted(map(str, namespaces))}, organisations {sorted(map(str, organizations))})",
            "Apply the objects jobs.render made for one application of a profile: each carries "
            f"{APP_LABEL} and {ORGANIZATION_LABEL}.",
        )
    return apps.pop(), namespaces.pop(), organizations.pop()


def identity(kind: Kind, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (kind.kind, meta.get("namespace", "") if kind.namespaced else "", meta.get("name", ""))


def describe(kind: Kind, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return kind.describe(meta.get("namespace"), meta.get("name"))


def refusal(what: str, error: BackendError) -> str:
    said = str(error)
    return said if said.startswith(what) else f"{what}: {said}"


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def at_version(kind: Kind, version: str | None) -> Kind:
    """The kind at the version the server prefers (Kueue serves v1beta1, later v1beta2)."""
    if not version or version == kind.version:
        return kind
    return Kind(kind.kind, kind.group, version, kind.plural, kind.namespaced, kind.provider)


def involved_name(event: Mapping[str, Any]) -> str:
    about = event.get("involvedObject") or event.get("regarding") or {}
    return str(about.get("name") or "")


def event_about(event: Mapping[str, Any], app: str, pods: set[str]) -> bool:
    """Whether an event concerns the application: its InferenceService, its pods, or what
    KServe and Kueue name after it (<app>-predictor-…, pod-<app>-…)."""
    about = event.get("involvedObject") or event.get("regarding") or {}
    name, kind = str(about.get("name") or ""), about.get("kind")
    if kind == "Pod":
        return name in pods
    if kind == "Workload":
        return name.startswith(f"pod-{app}-") or any(p in name for p in pods)
    return name == app or name.startswith(f"{app}-")


def runtime_vllm_version(runtime: Mapping[str, Any]) -> str | None:
    spec = runtime.get("spec") or {}
    formats = {
        str(f.get("name") or "").lower()
        for f in spec.get("supportedModelFormats") or []
        if isinstance(f, Mapping)
    }
    if not formats & {"huggingface", "vllm"}:
        return None
    for container in spec.get("containers") or []:
        image = str((container or {}).get("image") or "") if isinstance(container, Mapping) else ""
        found = vllm_version_of_image(image)
        if found:
            return found
    return None


def listing_of(listed: Mapping[str, Any]) -> Listing:
    rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
    return Listing(list(listed.get("items") or []), rv)
