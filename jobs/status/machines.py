"""What a user sees of an application in KubeVirt virtual machines: `derive_vm_status` turns
its VirtualMachines, their instances (VMIs), virt-launcher pods, weight volumes (claims) and
events into the same phases, reasons and next steps as `derive_status` gives for containers,
node by node.

Pure, like derive.py: the backend and the reconciler fetch, this decides. One replica is
`nodes` machines (the first leads); it serves when every instance of it runs and its leader
is Ready (its readiness probe: GET /v1/models). Replicas are counted from 1 in the words, as
users count them; the machines' names keep KubeVirt's r0, r1. Until the model server starts,
the leader's launcher answers the probe itself (jobs/render/guest_launcher.py): the kubelet's
"Readiness probe failed" event says with which status, downloading or refusing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobs.kube_names import predictor_url, vm_name, weights_claim_name
from jobs.manifest.view import dig
from jobs.render.guest_launcher import DOWNLOADING, VOLUME_MISSING
from jobs.status.derive import INTERNAL_ERROR, NOTHING, PULL_ERRORS, Status, _pull_trouble
from jobs.status.phases import Phase
from jobs.status.readers import (
    EPOCH,
    NO_CONDITION,
    Condition,
    Event,
    as_dict,
    as_int,
    as_list,
    as_str,
    aware,
    duration,
    explain_quota,
    last_line,
    parse_time,
    plural,
    read_conditions,
    read_event,
    read_pod,
)

__all__ = ["MachineFacts", "derive_vm_status"]

logger = logging.getLogger(__name__)
VM_NAME_LABEL = "vm.kubevirt.io/name"  # KubeVirt's label on an instance's virt-launcher pod
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
FAILED_PRINTABLE = {"CrashLoopBackOff", "ErrorPvcNotFound", "DataVolumeError"}
PULL_STEP = (
    "Check the container disk image (the profile's vmImage, or the default for its vLLM "
    "version) and that the registry credentials in {where} can pull it."
)
VIRTIOFS = (
    "KubeVirt must share PersistentVolumeClaims with virtiofs (feature gate "
    "EnableVirtioFsStorageVolumes)"
)
# The kubelet's event when an HTTP readiness probe gets an answer that is not 2xx/3xx.
PROBE_ANSWER = re.compile(r"Readiness probe failed: HTTP probe failed with statuscode: (\d{3})")
GPU_STEP = (
    "Lower countPerReplica or nodesPerReplica, pick another GPU model, stop another "
    "application on those nodes, or add GPU nodes whose devices KubeVirt passes through."
)


@dataclass(frozen=True)
class MachineFacts:
    """What the manifest says one replica needs, for the reasons' words."""

    app: str
    namespace: str
    desired: int
    nodes: int = 1
    gpu_count: int = 0
    gpu_model: str = ""  # the catalog's name: h100
    gpu_device: str = ""  # the device name: nvidia.com/GH100_H100_SXM5_80GB

    @property
    def gpus_words(self) -> str:
        kind = (self.gpu_model or "GPU").upper()
        return f"a free {kind}" if self.gpu_count == 1 else f"{self.gpu_count} free {kind}s"

    @property
    def endpoint(self) -> str:
        return predictor_url(self.app, self.namespace)

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}" if self.namespace else "the profile's namespace"


@dataclass(frozen=True)
class _Node:
    """One machine of one replica, and how far it got."""

    replica: int
    node: int
    name: str
    state: str  # missing, halted, volume, pending, unschedulable, scheduled, booting,
    # downloading, loading, ready, failed, pull
    detail: str = ""  # the words for this machine's state
    step: str = ""  # what to do, for a blocking state
    host: str = ""
    short: str = ""  # the state in a few words, after the machine's name

    @property
    def running(self) -> bool:
        return self.state in {"booting", "loading", "ready"}


def derive_vm_status(
    machines: list[dict],
    instances: list[dict],
    pods: list[dict],
    events: list[dict],
    facts: MachineFacts,
    *,
    claims: list[dict] | None = None,
    deleting: bool = False,
    now: datetime | None = None,
) -> Status:
    """The status of one virtual-machine application. Never raises: odd input gives a Status.
    `claims`: its weight volumes (PersistentVolumeClaims), which a replica waits for."""
    desired = max(as_int(facts.desired) or 0, 0)
    try:
        seen = (machines, instances, pods, events, claims)
        return _derive(*seen, facts, desired, deleting, now)
    except Exception:
        logger.exception("derive_vm_status failed on its input")
        return Status(
            Phase.PENDING,
            f"{INTERNAL_ERROR}; the application itself was not changed.",
            "Report it to the ServeDeck maintainers with the reconciler's log.",
            desired_replicas=desired,
        )


def _derive(machines, instances, pods, events, claims, facts, desired, deleting, now) -> Status:
    vms = {as_str(dig(m, "metadata", "name")): as_dict(m) for m in as_list(machines)}
    vmis = {as_str(dig(i, "metadata", "name")): as_dict(i) for i in as_list(instances)}
    volumes = {as_str(dig(c, "metadata", "name")): as_dict(c) for c in as_list(claims)}
    launchers = _launchers(pods)
    said = [read_event(e) for e in as_list(events)]
    moment = aware(now)
    nodes = max(as_int(facts.nodes) or 1, 1)
    seen = _Seen(vms, vmis, volumes, launchers, said)
    grid = [[_node(r, n, seen, facts, moment) for n in range(nodes)] for r in range(desired)]
    ready = sum(all(n.state == "ready" for n in replica) for replica in grid)

    def status(phase: Phase, reason: str, step: str = NOTHING, endpoint: str = "") -> Status:
        return Status(phase, reason, step, ready, desired, endpoint)

    if deleting:
        left = len(vms) + len(vmis)
        if not left:
            return status(Phase.DELETING, "Gone from the cluster; the console removes its record.")
        return status(
            Phase.DELETING,
            f"Deleting {plural(len(vms), 'VirtualMachine')} and "
            f"{plural(len(vmis), 'instance')} of {facts.app}; its volumes go with them.",
            "Nothing to do: it disappears once the cluster has removed it.",
        )
    # Stopped is what the machines say (runStrategy Halted), as the stop annotation is for
    # containers: there is no flag of the console's own to disagree with them.
    halted = bool(vms) and all(
        as_str(dig(m, "spec", "runStrategy")) == "Halted" for m in vms.values()
    )
    if halted:
        if vmis:
            return status(
                Phase.STOPPED,
                f"Stopping {facts.app}: {plural(len(vmis), 'instance')} still shutting down.",
                "Nothing to do: it shows Stopped when they are gone.",
            )
        return status(
            Phase.STOPPED,
            f"Application {facts.app} is stopped: its virtual machines are halted and their "
            "GPUs free; the machines, volumes, Services and settings are kept.",
            "Start it to serve again.",
        )
    if not vms:
        return status(
            Phase.PENDING,
            f"No VirtualMachine of {facts.app} is on the cluster.",
            "If none appears within a minute, deploy again from Deploy history; someone may "
            "have deleted them outside the console.",
        )
    everything = [n for replica in grid for n in replica]
    for state in ("pull", "failed"):
        broken = next((n for n in everything if n.state == state), None)
        if broken is not None:
            serving = f" Meanwhile {ready} of {desired} replicas still serve." if ready else ""
            return status(Phase.FAILED, broken.detail + serving, broken.step)
    if ready >= desired:
        return status(
            Phase.RUNNING,
            f"Serving at {facts.endpoint} with {ready} of {desired} replicas ready"
            + (f", each on {nodes} virtual machines: {_placement(grid)}." if nodes > 1 else "."),
            f'Nothing to do: send requests with model "{facts.app}".',
            facts.endpoint,
        )
    waiting = next(replica for replica in grid if not all(n.state == "ready" for n in replica))
    reason, phase, step = _replica_words(waiting, nodes, facts)
    if ready:
        return status(
            Phase.RUNNING,
            f"Serving at {facts.endpoint} with {ready} of {desired} replicas ready. {reason}",
            step or "Nothing to do: the other replicas join when they are ready.",
            facts.endpoint,
        )
    return status(phase, reason, step or NOTHING)


SHOWN_REPLICAS = 4


@dataclass(frozen=True)
class _Seen:
    """The objects read, by name."""

    vms: dict[str, dict]
    vmis: dict[str, dict]
    claims: dict[str, dict]
    launchers: dict[str, Any]
    events: list[Event]


def _placement(grid: list[list[_Node]]) -> str:
    """Which node each machine of the first replicas runs on: every VMI, shown."""
    said = [
        f"replica {replica[0].replica + 1} on {', '.join(n.host or '?' for n in replica)}"
        for replica in grid[:SHOWN_REPLICAS]
    ]
    more = len(grid) - SHOWN_REPLICAS
    return "; ".join(said) + (f"; and {plural(more, 'more replica')}" if more > 0 else "")


def _replica_words(replica: list[_Node], nodes: int, facts: MachineFacts):
    """Why this replica does not serve yet: the phase of its least advanced machine, and per
    node detail when it spans several."""
    order = (
        "missing",
        "halted",
        "volume",
        "unschedulable",
        "pending",
        "scheduled",
        "booting",
        "downloading",
        "loading",
    )
    behind = min(
        (n for n in replica if n.state != "ready"),
        key=lambda n: order.index(n.state) if n.state in order else len(order),
    )
    phase = {
        "missing": Phase.PENDING,
        "halted": Phase.PENDING,
        "volume": Phase.SCHEDULING,
        "unschedulable": Phase.SCHEDULING,
        "pending": Phase.SCHEDULING,
        "scheduled": Phase.DOWNLOADING,
        "booting": Phase.LOADING,
        "downloading": Phase.DOWNLOADING,
        "loading": Phase.LOADING,
    }.get(behind.state, Phase.PENDING)
    step = behind.step
    if nodes == 1:
        return behind.detail, phase, step
    running = sum(n.running for n in replica)
    others = [n for n in replica if not n.running]
    if not others:  # every machine runs: the leader is loading the model
        return behind.detail, phase, step
    parts = [_short(n) for n in others]
    head = f"{running} of {nodes} VMIs of replica {behind.replica + 1} are running"
    return f"{head}; {'; '.join(parts)}.", phase, step


def _short(n: _Node) -> str:
    which = ORDINALS[n.node] if n.node < len(ORDINALS) else f"machine {n.node + 1}"
    words = n.short or {
        "pending": "waits to be scheduled",
        "scheduled": f"is starting on node {n.host or '?'} (pulling its container disk)",
        "missing": "has no VirtualMachine on the cluster",
        "halted": "is halted",
    }.get(n.state, n.state)
    return f"the {which} ({n.name}) {words}"


def _launchers(pods: Any) -> dict[str, Any]:
    found = {}
    for raw in as_list(pods):
        labels = as_dict(dig(raw, "metadata", "labels"))
        name = as_str(labels.get(VM_NAME_LABEL))
        if name and not dig(raw, "metadata", "deletionTimestamp"):
            found[name] = raw
    return found


def _node(r: int, n: int, seen: _Seen, facts: MachineFacts, now) -> _Node:
    name = vm_name(facts.app, r, n)
    vm, vmi, launcher = seen.vms.get(name), seen.vmis.get(name), seen.launchers.get(name)
    events = seen.events
    if vm is None:
        return _Node(
            r,
            n,
            name,
            "missing",
            f"VirtualMachine {name} is not on the cluster.",
            "Deploy again from Deploy history; someone may have deleted it outside the console.",
        )
    if as_str(dig(vm, "spec", "runStrategy")) == "Halted" and vmi is None:
        return _Node(r, n, name, "halted", f"VirtualMachine {name} is halted.")
    printable = as_str(dig(vm, "status", "printableStatus"))
    pull = _pull_failure(name, printable, launcher, events, facts)
    if pull is not None:
        return _Node(r, n, name, "pull", pull, PULL_STEP.format(where=facts.where))
    status = as_dict(vmi.get("status")) if vmi is not None else {}
    phase = as_str(status.get("phase"))
    if vmi is not None and (phase == "Failed" or printable in FAILED_PRINTABLE):
        return _failed(r, n, name, printable or phase, vm, read_conditions(status))
    if vmi is None and printable in FAILED_PRINTABLE:
        return _failed(r, n, name, printable, vm)
    if phase in ("", "Pending", "Scheduling"):
        claim = seen.claims.get(weights_claim_name(facts.app, r))
        volume = _volume_wait(r, n, name, claim, events)
        if volume is not None:
            return volume
    if vmi is None:
        return _Node(r, n, name, "pending", f"VirtualMachine {name} has no instance yet.")
    conditions = read_conditions(status)
    host = as_str(status.get("nodeName"))
    refused = _refused_pod(r, n, name, conditions.get("Synchronized", NO_CONDITION), facts)
    if refused is not None:
        return refused
    scheduled = conditions.get("PodScheduled", NO_CONDITION)
    pod_scheduled = _pod_scheduled(launcher)
    for c in (scheduled, pod_scheduled):
        if c.status == "False" and c.reason == "Unschedulable":
            return _unschedulable(r, n, name, c.message, facts)
    if printable == "ErrorUnschedulable":
        return _unschedulable(r, n, name, "", facts)
    if phase in ("", "Pending", "Scheduling"):
        return _Node(r, n, name, "pending", f"Instance {name} waits to be scheduled on a node.")
    if phase == "Scheduled":
        return _Node(
            r,
            n,
            name,
            "scheduled",
            f"Starting instance {name} on node {host or '?'}: pulling its container disk and "
            "booting the guest.",
            "",
            host,
        )
    ready = conditions.get("Ready", NO_CONDITION)
    if ready.status == "True":
        return _Node(r, n, name, "ready", f"Instance {name} is ready.", host=host)
    if ready.reason == "GuestNotRunning" or phase != "Running":
        return _Node(
            r, n, name, "booting", f"The guest of instance {name} on node {host} is booting.",
            host=host,
        )  # fmt: skip
    answered = _probe_answer(launcher, events)
    if answered == DOWNLOADING:
        claim = weights_claim_name(facts.app, r)
        return _Node(
            r,
            n,
            name,
            "downloading",
            f"Downloading the weights into volume {claim} on instance {name} (node "
            f"{host or '?'}): its launcher answers the readiness probe until the model server "
            "starts.",
            host=host,
            short="downloads the weights",
        )
    if answered == VOLUME_MISSING:
        return _Node(
            r,
            n,
            name,
            "failed",
            f"The launcher of instance {name} refuses to start the model server: the weight "
            "volume is not mounted in the guest, so the weights would land on its root disk, "
            "which every restart loses.",
            f"{VIRTIOFS}, and the claim must be bound; fix that, then Restart. The guest's "
            f"console log says more (virtctl console {name}).",
        )
    took = duration(parse_time(_running_since(status)), now)
    agent = conditions.get("AgentConnected", NO_CONDITION).status == "True"
    detail = (
        f"Loading the model on instance {name} on node {host or '?'}: the guest runs"
        + (f" (for {took})" if took else "")
        + ("" if agent else " without its guest agent connected yet")
        + " and its model server does not answer GET /v1/models yet."
    )
    return _Node(r, n, name, "loading", detail, host=host)


def _newest(events: list[Event], kind: str, name: str, reasons: tuple[str, ...]) -> Event | None:
    about = [e for e in events if e.kind == kind and e.name == name and e.reason in reasons]
    return max(about, key=lambda e: e.when or EPOCH, default=None)


def _probe_answer(launcher: Any, events: list[Event]) -> int | None:
    """The status the leader's readiness probe last got, from the kubelet's newest event about
    it (None: no answer, or no such event)."""
    pod = as_str(dig(launcher, "metadata", "name")) if launcher is not None else ""
    said = _newest(events, "Pod", pod, ("Unhealthy",)) if pod else None
    found = PROBE_ANSWER.search(said.message) if said is not None else None
    return int(found.group(1)) if found else None


def _volume_wait(r, n, name, claim: Any, events: list[Event]) -> _Node | None:
    """The replica's weight volume, while it holds the instance back: not bound, and not only
    waiting for the instance to be scheduled first (WaitForFirstConsumer binds it then)."""
    if claim is None or as_str(dig(claim, "status", "phase")) != "Pending":
        return None
    volume = as_str(dig(claim, "metadata", "name"))
    said = _newest(
        events,
        "PersistentVolumeClaim",
        volume,
        ("ProvisioningFailed", "FailedBinding", "ExternalProvisioning", "WaitForFirstConsumer"),
    )
    if said is None or said.reason == "WaitForFirstConsumer":
        return None
    modes = [as_str(m) for m in as_list(dig(claim, "spec", "accessModes"))]
    access = modes[0] if modes else "ReadWriteOnce"
    storage_class = as_str(dig(claim, "spec", "storageClassName"))
    where = f"storage class {storage_class}" if storage_class else "the cluster's default storage"
    if said.reason == "ExternalProvisioning":
        return _Node(
            r,
            n,
            name,
            "volume",
            f"Instance {name} waits for its weight volume {volume}: {where} is provisioning it.",
            short=f"waits for its weight volume {volume}",
        )
    shared = " (every machine of a replica mounts it)" if access == "ReadWriteMany" else ""
    detail = _said(
        f"Instance {name} waits for its weight volume {volume} (PersistentVolumeClaim, "
        f"{access}), which {where} cannot provide",
        last_line(said.message),
    )
    step = (
        f"Set the profile's weightsStorageClass to a storage class that provides {access} "
        f"filesystem volumes{shared}, or ask an admin for one; {VIRTIOFS}. Then deploy again."
    )
    return _Node(r, n, name, "volume", detail, step, short=f"waits for its weight volume {volume}")


def _running_since(status: dict) -> str:
    for raw in as_list(status.get("phaseTransitionTimestamps")):
        if as_str(dig(raw, "phase")) == "Running":
            return as_str(dig(raw, "phaseTransitionTimestamp"))
    return ""


def _pod_scheduled(pod: Any) -> Condition:
    if pod is None:
        return NO_CONDITION
    return read_conditions(dig(pod, "status")).get("PodScheduled", NO_CONDITION)


def _pull_failure(name, printable, pod, events, facts) -> str | None:
    image, reason, said = "", printable if printable in PULL_ERRORS else "", ""
    if pod is not None:
        read = read_pod(pod, facts.gpu_device or "nvidia.com/gpu")
        for c in read.containers:
            if c.state == "waiting" and c.reason in PULL_ERRORS:
                image, reason, said = c.image, c.reason, c.message
                failed = next(
                    (e for e in events if e.reason == "Failed" and e.name == read.name), None
                )
                if failed is not None and "image" in failed.message:
                    said = failed.message
                break
    if not reason:
        return None
    why = _pull_trouble(said.lower()) or last_line(said) or "no detail from the kubelet"
    shown = f" {image}" if image else ""
    return f"Machine {name} cannot pull its container disk{shown} ({reason}: {why})."


_CAUSES = (
    ("Insufficient memory", "memory", "enough free memory"),
    ("Insufficient cpu", "cpu", "enough free CPU"),
)


def _unschedulable(r, n, name, message, facts: MachineFacts) -> _Node:
    text = message or ""
    device = facts.gpu_device
    if (device and f"Insufficient {device}" in text) or (facts.gpu_count and not text):
        need = facts.gpus_words
        step = GPU_STEP
    elif any(x in text for x in ("node affinity", "node selector")):
        need = "the GPU model and capacity type it asks for"
        step = "Pick a GPU model or capacity type the cluster has, or add nodes of that kind."
    else:
        need = next((words for needle, _, words in _CAUSES if needle in text), "room for it")
        step = "Lower resources.cpu or resources.memory, stop another application, or add nodes."
    counted = re.search(r"(\d{1,9})/(\d{1,9}) nodes are available", text)
    nodes = f" ({counted.group(1)} of {counted.group(2)} nodes have it)" if counted else ""
    short = f"waits for a node with {need}{nodes}"
    return _Node(r, n, name, "unschedulable", f"{name} {short}.", step, short=short)


def _refused_pod(r, n, name, synced: Condition, facts: MachineFacts) -> _Node | None:
    """virt-controller could not create the instance's pod: a full ResourceQuota (it waits) or
    a policy or webhook refusing it (it fails)."""
    if synced.status != "False" or synced.reason != "FailedCreate":
        return None
    said = synced.message
    quota = explain_quota(said, facts.gpu_device or "nvidia.com/gpu")
    if quota is not None:
        return _Node(r, n, name, "unschedulable", quota[0], quota[1], short="waits for quota")
    return _Node(
        r,
        n,
        name,
        "failed",
        _said(
            f"Kubernetes refuses to create the pod of instance {name}", last_line(synced.message)
        ),
        "A policy or admission webhook of the namespace rejects the pod: fix what the message "
        "names, or ask an admin about the policy.",
    )


def _said(text: str, detail: str) -> str:
    text = f"{text}: {detail}" if detail else text
    return text if text.endswith(".") else f"{text}."


def _failed(r, n, name, why, vm, conditions=None) -> _Node:
    failures = as_int(dig(vm, "status", "startFailure", "consecutiveFailCount")) or 0
    cond = (conditions or {}).get("Ready", NO_CONDITION)
    said = last_line(cond.message) if cond.message else ""
    count = f", {plural(failures, 'failed start')}" if failures else ""
    detail = f"The guest of machine {name} stopped ({why or 'Failed'}{count})"
    detail += f": {said}." if said else "."
    return _Node(
        r,
        n,
        name,
        "failed",
        detail,
        f"Read its console log (virtctl console {name}) and the model server's log, fix the "
        "setting it names and deploy again, or roll back from Deploy history.",
    )
