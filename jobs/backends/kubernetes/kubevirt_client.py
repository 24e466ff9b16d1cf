"""An application in KubeVirt virtual machines on a cluster: the verbs that differ from the
container ones (kserve_client.py), on the same API client and with the same ownership checks.

    machines = Machines(client)            # client: a KServeClient
    machines.restart("llama", "models", organization="acme")   # new instances, same volumes
    machines.stop(...) / machines.start(...)                    # runStrategy Halted / Always
    machines.observe(...)                           # machines, instances, pods, claims, events

Restart deletes the instances: each VirtualMachine (runStrategy Always) starts a new one on the
same volumes. Stop halts the VirtualMachines: their instances go and free the GPUs, while the
machines, volumes and Services stay. Apply keeps a halted machine halted (keep_halted).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.render.kubevirt import TEMPLATE_HASH

from .cluster_objects import app_selector, event_about, object_name
from .errors import BackendError, NotFound
from .kinds import (
    EVENT,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
)
from .kserve_client import KServeClient
from .owner import is_ours

HALTED, ALWAYS = "Halted", "Always"

__all__ = ["MachineObjects", "Machines", "is_virtual_machine_app"]


def is_virtual_machine_app(manifest: Mapping[str, Any]) -> bool:
    model = (manifest.get("spec") or {}).get("source", {}).get("model") or {}
    return (model.get("runtime") or {}).get("isolation") == "VirtualMachine"


@dataclass(frozen=True)
class MachineObjects:
    """The raw objects jobs.status.derive_vm_status reads for one application."""

    machines: list[dict]
    instances: list[dict]
    pods: list[dict]
    events: list[dict]
    claims: list[dict]  # the replicas' weight volumes


class Machines:
    def __init__(self, client: KServeClient) -> None:
        self.client = client
        self.api = client.api

    def _mine(self, kind, app: str, namespace: str, organization: str) -> list[dict]:
        selector = app_selector(app, organization=organization)
        items = self.api.list(kind, namespace, selector).get("items") or []
        return [o for o in items if is_ours(o, app, organization)]

    def _require_machines(self, app: str, namespace: str, organization: str) -> list[dict]:
        machines = self._mine(VIRTUAL_MACHINE, app, namespace, organization)
        if not machines:
            raise NotFound(
                f"Application {app} has no VirtualMachine in namespace {namespace}",
                "Deploy it first; if it was deployed, someone may have deleted its machines "
                "outside the console: deploy again from Deploy history.",
                status=404,
            )
        return machines

    def restart(self, app: str, namespace: str, *, organization: str) -> int:
        """Delete the application's instances; their VirtualMachines make new ones on the same
        volumes. Returns how many were deleted."""
        self._require_machines(app, namespace, organization)
        instances = self._mine(VIRTUAL_MACHINE_INSTANCE, app, namespace, organization)
        for instance in instances:
            with contextlib.suppress(NotFound):
                self.api.delete(VIRTUAL_MACHINE_INSTANCE, object_name(instance), namespace)
        return len(instances)

    def stop(self, app: str, namespace: str, *, organization: str) -> None:
        self._run_strategy(app, namespace, organization, HALTED)

    def start(self, app: str, namespace: str, *, organization: str) -> None:
        self._run_strategy(app, namespace, organization, ALWAYS)

    def _run_strategy(self, app: str, namespace: str, organization: str, strategy: str) -> None:
        for machine in self._require_machines(app, namespace, organization):
            meta: dict[str, Any] = {}
            version = (machine.get("metadata") or {}).get("resourceVersion")
            if version:  # conditional: fails if the machine was replaced since it was read
                meta["resourceVersion"] = version
            patch = {"metadata": meta, "spec": {"runStrategy": strategy}}
            self.api.merge_patch(VIRTUAL_MACHINE, object_name(machine), namespace, patch)

    def replace_outdated(self, app: str, namespace: str, *, organization: str) -> int:
        """After an apply: delete each instance made from an older template of its running
        machine (KubeVirt only marks those RestartRequired), so a new revision, or a rollback,
        runs as a container's would. Returns how many were replaced."""
        machines = {
            object_name(m): m
            for m in self._listed(VIRTUAL_MACHINE, app, namespace, organization)
            if (m.get("spec") or {}).get("runStrategy") == ALWAYS
        }
        replaced = 0
        for instance in self._listed(VIRTUAL_MACHINE_INSTANCE, app, namespace, organization):
            machine = machines.get(object_name(instance))
            if machine is None:
                continue
            wanted = _template_hash((machine.get("spec") or {}).get("template"))
            if wanted and _template_hash(instance) != wanted:
                with contextlib.suppress(NotFound):
                    self.api.delete(VIRTUAL_MACHINE_INSTANCE, object_name(instance), namespace)
                replaced += 1
        return replaced

    def keep_halted(
        self, objects: list[dict], app: str, namespace: str, organization: str
    ) -> list[dict]:
        """The rendered objects, with each VirtualMachine that is halted on the cluster kept
        halted: a redeploy of a stopped application does not start it."""
        try:
            live = self._mine(VIRTUAL_MACHINE, app, namespace, organization)
        except BackendError as error:
            if error.status == 404:  # KubeVirt not served: the apply will say so
                return objects
            raise
        halted = {
            object_name(m) for m in live if (m.get("spec") or {}).get("runStrategy") == HALTED
        }
        if not halted:
            return objects
        out = []
        for obj in objects:
            if obj.get("kind") == VIRTUAL_MACHINE.kind and object_name(obj) in halted:
                obj = {**obj, "spec": {**obj["spec"], "runStrategy": HALTED}}
            out.append(obj)
        return out

    def observe(self, app: str, namespace: str, *, organization: str) -> MachineObjects:
        """The application's VirtualMachines, their instances and virt-launcher pods (KubeVirt
        copies the instance's labels onto them), its weight volumes (one per replica: the
        label selector bounds the list), and the namespace's events about them."""
        machines = self._listed(VIRTUAL_MACHINE, app, namespace, organization)
        instances = self._listed(VIRTUAL_MACHINE_INSTANCE, app, namespace, organization)
        pods = self._mine(POD, app, namespace, organization)
        claims = self._mine(PERSISTENT_VOLUME_CLAIM, app, namespace, organization)
        names = {object_name(p) for p in pods} | {object_name(i) for i in instances}
        events = self.api.list(EVENT, namespace).get("items") or []
        about = [e for e in events if event_about(e, app, names) or _about_instance(e, names)]
        return MachineObjects(machines, instances, pods, about, claims)

    def _listed(self, kind, app: str, namespace: str, organization: str) -> list[dict]:
        try:
            return self._mine(kind, app, namespace, organization)
        except BackendError as error:
            if error.status == 404:  # KubeVirt is not installed (any more): none
                return []
            raise


def _template_hash(obj: Any) -> str:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(TEMPLATE_HASH) or "")


def _about_instance(event: Mapping[str, Any], names: set[str]) -> bool:
    about = event.get("involvedObject") or event.get("regarding") or {}
    return about.get("kind") == VIRTUAL_MACHINE_INSTANCE.kind and about.get("name") in names
