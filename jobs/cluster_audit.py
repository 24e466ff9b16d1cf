"""Clusters' and profiles' changes in the audit log: which of their settings changed, by name,
never a value (a kubeconfig's whereabouts, a token reference, a catalog's prices are said to
have changed, not what they are). The forms (pages and command line alike) and the discover
verbs record through `record_saved`."""

from __future__ import annotations

from typing import Any

from accesspolicies import audit
from jobs.models import Cluster, Profile
from jobs.usage.cost import PRICE_KEY

# model field -> the name the audit log says changed
CLUSTER_FIELDS = {
    "name": "name",
    "backend": "backend",
    "kubeconfig_path": "kubeconfig",
    "context": "context",
    "in_cluster": "inCluster",
    "addons": "addons",
    "queues": "queues",
    "cache_node_groups": "cachedNodeGroups",
    "kubevirt_devices": "kubevirtDevices",
}
UNSET = (None, "", [], {}, False)  # what a setting a creation leaves out holds
PROFILE_FIELDS = {
    "name": "name",
    "cluster_id": "cluster",
    "namespace": "namespace",
    "extra_namespaces": "otherNamespaces",
    "hf_token_ref": "hfToken",
    "storage_credentials_ref": "storageCredentials",
    "storage_service_account": "storageServiceAccount",
    "storage_secret": "storageSecret",
    "image_pull_secret": "imagePullSecret",
    "vllm_version": "vllmVersion",
    "defaults": "defaults",
}


def snapshot(obj: Cluster | Profile) -> dict[str, Any]:
    """The audited settings of a cluster or profile as they are now (compared, never kept)."""
    if isinstance(obj, Cluster):
        return {label: getattr(obj, field) for field, label in CLUSTER_FIELDS.items()}
    found = {label: getattr(obj, field) for field, label in PROFILE_FIELDS.items()}
    catalog = obj.machine_catalog if isinstance(obj.machine_catalog, list) else []
    kinds = [kind for kind in catalog if isinstance(kind, dict)]
    # Prices apart from the machines: an admin reading the log sees which of the two changed.
    found["machineCatalog"] = [{k: v for k, v in kind.items() if k != PRICE_KEY} for kind in kinds]
    found["prices"] = {
        str(kind.get("name")): kind[PRICE_KEY] for kind in kinds if PRICE_KEY in kind
    }
    return found


def record_saved(
    obj: Cluster | Profile, before: dict[str, Any] | None, actor, verb: str = "update"
) -> None:
    """Record that `actor` created `obj` (`before` None) or changed it (`verb`: update,
    discover) when any audited setting differs from `before`; an unchanged save records
    nothing."""
    kind = "cluster" if isinstance(obj, Cluster) else "profile"
    after = snapshot(obj)
    if before is None:
        changed = [label for label, value in after.items() if value not in UNSET]
        verb = "create"
    else:
        changed = [label for label, value in after.items() if before.get(label) != value]
        if not changed:
            return
    audit.record(obj.organization, actor, f"{kind}.{verb}", kind, obj.name, {"changed": changed})
