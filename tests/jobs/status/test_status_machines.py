"""derive_vm_status: a table of the shapes KubeVirt writes (VirtualMachines, their instances'
phases and conditions, virt-launcher pods, events) and the phase, reason and next step each
gives, in the words derive_status uses for containers; multi-node replicas say each node.

The machines are the renderer's own (jobs.render), their instances made as KubeVirt makes them
(tests/fakes/kube_objects.py).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from jobs.status import INTERNAL_ERROR, MachineFacts, derive_vm_status
from jobs.status.phases import Phase
from tests.fakes.kube_objects import instance_of, launcher_pod
from tests.jobs.render.test_render import gpu
from tests.jobs.render.test_render_kubevirt import machines, vm_build

H100 = "nvidia.com/GH100_H100_SXM5_80GB"
SINGLE_OBJECTS = vm_build(gpu("h100", 8))
TRIPLE_OBJECTS = vm_build(
    {**gpu("h100", 8), "resources.nodesPerReplica": 3, "scaling.minReplicas": 2}
)
SINGLE, TRIPLE = machines(SINGLE_OBJECTS), machines(TRIPLE_OBJECTS)
ONE = MachineFacts("app", "ml-serving", 1, 1, 8, "h100", H100)
THREE = MachineFacts("app", "ml-serving", 2, 3, 8, "h100", H100)
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": f"0/6 nodes are available: 2 Insufficient {H100}, 4 node(s) didn't match "
    "Pod's node affinity/selector.",
}

QUOTA_FULL = {
    "type": "Synchronized",
    "status": "False",
    "reason": "FailedCreate",
    "message": 'pods "virt-launcher-app-r0-n0-x" is forbidden: exceeded quota: gpus, requested: '
    f"requests.{H100}=8, used: requests.{H100}=8, limited: requests.{H100}=8",
}
POLICY_DENIED = {
    "type": "Synchronized",
    "status": "False",
    "reason": "FailedCreate",
    "message": 'admission webhook "policy.example.com" denied the request: no GPUs here',
}


def ago(minutes: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pending_claim(objects, replica=0):
    """The replica's weight volume as rendered, not bound yet."""
    name = f"app-weights-r{replica}"
    (claim,) = [o for o in objects if o["metadata"]["name"] == name]
    return {**copy.deepcopy(claim), "status": {"phase": "Pending"}}


def claim_event(name, reason, message, minutes=1):
    """What the PersistentVolume controller (or the external provisioner) says of a claim."""
    return {
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": name},
        "reason": reason,
        "message": message,
        "lastTimestamp": ago(minutes),
    }


def probe_event(pod, said, minutes=0.5):
    """The kubelet's event when the readiness probe of a launcher pod fails."""
    return {
        "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"]},
        "reason": "Unhealthy",
        "message": f"Readiness probe failed: {said}",
        "lastTimestamp": ago(minutes),
    }


NO_RWX = (
    'failed to provision volume with StorageClass "standard": rpc error: code = '
    "InvalidArgument desc = access mode ReadWriteMany is not supported"
)
REFUSED = (
    'Get "http://10.1.2.3:8000/v1/models": dial tcp 10.1.2.3:8000: connect: connection refused'
)


def running(vm, ready=True, **kw):
    return instance_of(vm, "Running", ready=ready, **kw)


def halted(vm):
    out = copy.deepcopy(vm)
    out["spec"]["runStrategy"] = "Halted"
    return out


def with_printable(vm, printable, failures=0):
    out = copy.deepcopy(vm)
    out["status"] = {"printableStatus": printable}
    if failures:
        out["status"]["startFailure"] = {"consecutiveFailCount": failures}
    return out


def loading(vm, agent=True):
    conditions = [
        {"type": "Ready", "status": "False", "reason": "PodNotReady"},
        {"type": "AgentConnected", "status": "True" if agent else "False"},
    ]
    return instance_of(vm, "Running", conditions=conditions)


def guest_not_running(vm):
    conditions = [{"type": "Ready", "status": "False", "reason": "GuestNotRunning"}]
    return instance_of(vm, "Running", conditions=conditions)


def failed(vm):
    conditions = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "GuestNotRunning",
            "message": "guest crashed: kernel panic",
        }
    ]
    return instance_of(vm, "Failed", conditions=conditions)


r0, r1 = TRIPLE[:3], TRIPLE[3:]
LOADING = loading(SINGLE[0])
LAUNCHER = launcher_pod(LOADING, ready=False)
CASES = [
    # (name, machines, instances, pods, facts, kwargs, phase, words in the reason, in the step)
    ("not-on-cluster", [], [], [], ONE, {}, Phase.PENDING, "No VirtualMachine", "deploy again"),
    ("no-instance-yet", SINGLE, [], [], ONE, {}, Phase.SCHEDULING, "has no instance yet", ""),
    (
        "pending",
        SINGLE,
        [instance_of(SINGLE[0], "Pending")],
        [],
        ONE,
        {},
        Phase.SCHEDULING,
        "waits to be scheduled",
        "",
    ),
    (
        "scheduling-no-gpu-devices",
        SINGLE,
        [instance_of(SINGLE[0], "Scheduling", conditions=[UNSCHEDULABLE])],
        [],
        ONE,
        {},
        Phase.SCHEDULING,
        "app-r0-n0 waits for a node with 8 free H100s (0 of 6 nodes have it)",
        "pick another GPU model",
    ),
    (
        "scheduled-booting",
        SINGLE,
        [instance_of(SINGLE[0], "Scheduled", node="gpu-7")],
        [],
        ONE,
        {},
        Phase.DOWNLOADING,
        "on node gpu-7: pulling its container disk",
        "",
    ),
    (
        "guest-not-running",
        SINGLE,
        [guest_not_running(SINGLE[0])],
        [],
        ONE,
        {},
        Phase.LOADING,
        "is booting",
        "",
    ),
    (
        "loading-agent-connected",
        SINGLE,
        [loading(SINGLE[0])],
        [],
        ONE,
        {},
        Phase.LOADING,
        "its model server does not answer GET /v1/models yet",
        "",
    ),
    (
        "loading-agent-not-connected",
        SINGLE,
        [loading(SINGLE[0], agent=False)],
        [],
        ONE,
        {},
        Phase.LOADING,
        "without its guest agent connected yet",
        "",
    ),
    (
        "running",
        SINGLE,
        [running(SINGLE[0])],
        [],
        ONE,
        {},
        Phase.RUNNING,
        "Serving at http://app-predictor.ml-serving.svc.cluster.local with 1 of 1",
        'send requests with model "app"',
    ),
    (
        "image-pull",
        SINGLE,
        [instance_of(SINGLE[0], "Scheduled")],
        [launcher_pod(instance_of(SINGLE[0], "Scheduled"), pull_error="ImagePullBackOff")],
        ONE,
        {},
        Phase.FAILED,
        "cannot pull its container disk ghcr.io/servedeck/vllm-vm:",
        "container disk image",
    ),
    (
        "image-pull-printable",
        [with_printable(SINGLE[0], "ErrImagePull")],
        [],
        [],
        ONE,
        {},
        Phase.FAILED,
        "Machine app-r0-n0 cannot pull its container disk (ErrImagePull",
        "registry credentials in namespace ml-serving",
    ),
    (
        "failed-guest",
        SINGLE,
        [failed(SINGLE[0])],
        [],
        ONE,
        {},
        Phase.FAILED,
        "The guest of machine app-r0-n0 stopped (Failed): guest crashed: kernel panic.",
        "virtctl console app-r0-n0",
    ),
    (
        "crash-loop",
        [with_printable(SINGLE[0], "CrashLoopBackOff", failures=4)],
        [],
        [],
        ONE,
        {},
        Phase.FAILED,
        "(CrashLoopBackOff, 4 failed starts)",
        "roll back from Deploy history",
    ),
    (
        "quota-full",
        SINGLE,
        [instance_of(SINGLE[0], "Pending", conditions=[QUOTA_FULL])],
        [],
        ONE,
        {},
        Phase.SCHEDULING,
        "The namespace's ResourceQuota gpus refuses new replicas",
        "raise ResourceQuota gpus",
    ),
    (
        "pod-refused-by-policy",
        SINGLE,
        [instance_of(SINGLE[0], "Pending", conditions=[POLICY_DENIED])],
        [],
        ONE,
        {},
        Phase.FAILED,
        "Kubernetes refuses to create the pod of instance app-r0-n0: admission webhook",
        "ask an admin about the policy",
    ),
    (
        "stopped",
        [halted(SINGLE[0])],
        [],
        [],
        ONE,
        {},
        Phase.STOPPED,
        "virtual machines are halted and their GPUs free",
        "Start it",
    ),
    (
        "stopping",
        [halted(SINGLE[0])],
        [running(SINGLE[0])],
        [],
        ONE,
        {},
        Phase.STOPPED,
        "1 instance still shutting down",
        "",
    ),
    (
        "deleting",
        SINGLE,
        [running(SINGLE[0])],
        [],
        ONE,
        {"deleting": True},
        Phase.DELETING,
        "Deleting 1 VirtualMachine and 1 instance",
        "disappears",
    ),
    ("deleted", [], [], [], ONE, {"deleting": True}, Phase.DELETING, "Gone from the cluster", ""),
    (
        "multinode-partial-readiness",
        TRIPLE,
        [
            running(r0[0], ready=False),
            running(r0[1]),
            instance_of(r0[2], "Scheduling", conditions=[UNSCHEDULABLE]),
        ],
        [],
        THREE,
        {},
        Phase.SCHEDULING,
        "2 of 3 VMIs of replica 1 are running; the third (app-r0-n2) waits for a node with 8 "
        "free H100s",
        "add GPU nodes",
    ),  # fmt: skip
    (
        "multinode-one-replica-serves",
        TRIPLE,
        [
            *(running(vm) for vm in r0),
            running(r1[0], ready=False),
            running(r1[1]),
            instance_of(r1[2], "Scheduled", node="gpu-9"),
        ],
        [],
        THREE,
        {},
        Phase.RUNNING,
        "with 1 of 2 replicas ready. 2 of 3 VMIs of replica 2 are running; the third "
        "(app-r1-n2) is starting on node gpu-9",
        "the other replicas join",
    ),  # fmt: skip
    (
        "multinode-all-run-leader-loads",
        TRIPLE,
        [loading(r0[0]), running(r0[1]), running(r0[2]), *(running(vm) for vm in r1)],
        [],
        THREE,
        {},
        Phase.RUNNING,
        "Loading the model on instance app-r0-n0",
        "",
    ),
    (
        "multinode-all-ready",
        TRIPLE,
        [running(vm, node=f"gpu-{i}") for i, vm in enumerate(TRIPLE)],
        [],
        THREE,
        {},
        Phase.RUNNING,
        "with 2 of 2 replicas ready, each on 3 virtual machines: replica 1 on gpu-0, gpu-1, "
        "gpu-2; replica 2 on gpu-3, gpu-4, gpu-5.",
        "",
    ),
    (
        "multinode-worker-missing",
        [r0[0], r0[2], *r1],
        [running(r0[0], ready=False), running(r0[2])],
        [],
        THREE,
        {},
        Phase.PENDING,
        "the second (app-r0-n1) has no VirtualMachine on the cluster",
        "Deploy again from Deploy history",
    ),
    (
        "volume-no-storage-for-it",
        SINGLE,
        [instance_of(SINGLE[0], "Pending")],
        [],
        ONE,
        {
            "claims": [pending_claim(SINGLE_OBJECTS)],
            "events": [claim_event("app-weights-r0", "ProvisioningFailed", "no volume plugin")],
        },
        Phase.SCHEDULING,
        "Instance app-r0-n0 waits for its weight volume app-weights-r0 (PersistentVolumeClaim, "
        "ReadWriteOnce), which the cluster's default storage cannot provide: no volume plugin.",
        "weightsStorageClass to a storage class that provides ReadWriteOnce filesystem volumes",
    ),  # fmt: skip
    (
        "multinode-volume-without-read-write-many",
        TRIPLE,
        [instance_of(vm, "Scheduling") for vm in r0],
        [],
        THREE,
        {
            "claims": [pending_claim(TRIPLE_OBJECTS)],
            "events": [claim_event("app-weights-r0", "ProvisioningFailed", NO_RWX)],
        },
        Phase.SCHEDULING,
        "0 of 3 VMIs of replica 1 are running; the first (app-r0-n0) waits for its weight "
        "volume app-weights-r0",
        "ReadWriteMany filesystem volumes (every machine of a replica mounts it)",
    ),  # fmt: skip
    (
        "volume-being-provisioned",
        SINGLE,
        [],
        [],
        ONE,
        {
            "claims": [pending_claim(SINGLE_OBJECTS)],
            "events": [
                claim_event(
                    "app-weights-r0",
                    "ExternalProvisioning",
                    "Waiting for a volume to be created either by the external provisioner",
                )
            ],
        },
        Phase.SCHEDULING,
        "waits for its weight volume app-weights-r0: the cluster's default storage is "
        "provisioning it",
        "",
    ),
    (
        "volume-binds-when-scheduled",  # WaitForFirstConsumer: the GPUs are what it waits for
        SINGLE,
        [instance_of(SINGLE[0], "Scheduling", conditions=[UNSCHEDULABLE])],
        [],
        ONE,
        {
            "claims": [pending_claim(SINGLE_OBJECTS)],
            "events": [
                claim_event(
                    "app-weights-r0",
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                )
            ],
        },
        Phase.SCHEDULING,
        "app-r0-n0 waits for a node with 8 free H100s",
        "add GPU nodes",
    ),
    (
        "downloading-in-the-guest",
        SINGLE,
        [LOADING],
        [LAUNCHER],
        ONE,
        {"events": [probe_event(LAUNCHER, "HTTP probe failed with statuscode: 503")]},
        Phase.DOWNLOADING,
        "Downloading the weights into volume app-weights-r0 on instance app-r0-n0",
        "",
    ),
    (
        "downloaded-now-loading",
        SINGLE,
        [LOADING],
        [LAUNCHER],
        ONE,
        {
            "events": [
                probe_event(LAUNCHER, "HTTP probe failed with statuscode: 503", minutes=3),
                probe_event(LAUNCHER, REFUSED, minutes=0.2),
            ]
        },
        Phase.LOADING,
        "Loading the model on instance app-r0-n0",
        "",
    ),
    (
        "weight-volume-not-mounted-in-the-guest",
        SINGLE,
        [LOADING],
        [LAUNCHER],
        ONE,
        {"events": [probe_event(LAUNCHER, "HTTP probe failed with statuscode: 507")]},
        Phase.FAILED,
        "The launcher of instance app-r0-n0 refuses to start the model server: the weight "
        "volume is not mounted in the guest",
        "EnableVirtioFsStorageVolumes",
    ),
    (
        "multinode-failure-beats-progress",
        TRIPLE,
        [*(running(vm) for vm in r0), failed(r1[1])],
        [],
        THREE,
        {},
        Phase.FAILED,
        "The guest of machine app-r1-n1 stopped (Failed): guest crashed: kernel panic. "
        "Meanwhile 1 of 2 replicas still serve.",
        "",
    ),
]


@pytest.mark.parametrize(
    ("vms", "vmis", "pods", "facts", "kw", "phase", "reason", "step"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_status_of_virtual_machines(vms, vmis, pods, facts, kw, phase, reason, step):
    more = dict(kw)
    events = more.pop("events", [])
    status = derive_vm_status(vms, vmis, pods, events, facts, **more)
    assert status.phase == phase, status
    assert reason in status.reason, status.reason
    assert step in status.next_step, status.next_step
    assert status.desired_replicas == facts.desired


def test_ready_replicas_count_whole_replicas_only():
    vmis = [*(running(vm) for vm in r0), running(r1[0]), running(r1[1])]
    status = derive_vm_status(TRIPLE, vmis, [], [], THREE)
    assert status.ready_replicas == 1
    assert status.endpoint == "http://app-predictor.ml-serving.svc.cluster.local"


def test_the_kubelets_pull_event_says_why():
    vmi = instance_of(SINGLE[0], "Scheduled")
    pod = launcher_pod(vmi, pull_error="ErrImagePull")
    event = {
        "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"]},
        "reason": "Failed",
        "message": 'Failed to pull image "ghcr.io/servedeck/vllm-vm:v9": 401 Unauthorized',
        "lastTimestamp": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
    }
    status = derive_vm_status(SINGLE, [vmi], [pod], [event], ONE)
    assert "the registry refused access" in status.reason


@pytest.mark.parametrize("junk", [None, 3, "x", [1, None], [{"metadata": 5}]])
def test_odd_input_gives_a_status_never_a_crash(junk):
    status = derive_vm_status(junk, junk, junk, junk, ONE)
    assert isinstance(status.phase, Phase)
    assert INTERNAL_ERROR not in status.reason
