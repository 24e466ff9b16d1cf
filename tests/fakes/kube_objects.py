"""Kubernetes objects as KServe and the kubelet write them, for tests and benches that put them
into the API emulator (tests/fakes/kube.py), and a cluster on that emulator to follow them on.

    kube.put(with_status(kube.get("InferenceService", "bge-embed", "models"), ready=True))
    kube.put(predictor_pod("bge-embed", "models", ready=False, oom=True))

The `prod` fixture (registered for every test by tests/conftest.py) is a Kubernetes
cluster "prod" on the emulator with a profile "prod" in namespace PROD_NAMESPACE.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.backends.kubernetes.backend import forget_clients
from jobs.models import Cluster, Profile
from jobs.render import APP_LABEL
from jobs.render.common import ORGANIZATION_LABEL

PROD_NAMESPACE = "models"


def now() -> str:
    """The current time as the API server writes timestamps: 2025-03-04T10:30:00Z."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_status(isvc: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    """A copy of an InferenceService with the status KServe writes once its predictor is (or is
    no longer) ready: the three conditions, the URL in the cluster and the observed generation."""
    obj = copy.deepcopy(isvc)
    meta = obj["metadata"]
    status = "True" if ready else "False"
    obj["status"] = {
        "observedGeneration": meta.get("generation", 1),
        "url": f"http://{meta['name']}.{meta['namespace']}.svc.cluster.local",
        "conditions": [
            {"type": t, "status": status, "lastTransitionTime": now()}
            for t in ("PredictorReady", "IngressReady", "Ready")
        ],
    }
    return obj


def predictor_pod(
    app: str,
    namespace: str,
    *,
    name: str | None = None,
    ready: bool = True,
    oom: bool = False,
    organization: str = "acme",
) -> dict[str, Any]:
    """The running predictor pod of application `app` of `organization` (one container, 4Gi
    memory limit), named `{app}-predictor-5d8f-x7k2p` unless `name` says otherwise. Not ready:
    its Ready condition and container say so; oom: the container was OOMKilled and is in
    CrashLoopBackOff."""
    container: dict[str, Any] = {
        "name": "kserve-container",
        "image": "kserve/huggingfaceserver:v0.15.2",
        "ready": ready,
        "restartCount": 3 if oom else 0,
    }
    if oom:
        container["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}
        container["lastState"] = {
            "terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": now()}
        }
    else:
        container["state"] = {"running": {"startedAt": now()}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"{app}-predictor-5d8f-x7k2p",
            "namespace": namespace,
            "creationTimestamp": now(),
            "labels": {
                APP_LABEL: app,  # the console's labels, carried over from the InferenceService
                ORGANIZATION_LABEL: organization,
                "serving.kserve.io/inferenceservice": app,
                "component": "predictor",
                "pod-template-hash": "5d8f",
            },
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {"name": "kserve-container", "resources": {"limits": {"memory": "4Gi"}}}
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
            "containerStatuses": [container],
        },
    }


def endpoint_slice(service: str, namespace: str, *addresses: str) -> dict[str, Any]:
    """The EndpointSlice `{service}-x1` Kubernetes keeps for Service `service`: each address a
    ready endpoint on port 8080 (http). No addresses: the empty slice of a Service whose pods
    are gone."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-x1",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def instance_of(
    machine: dict[str, Any],
    phase: str = "Running",
    *,
    ready: bool = True,
    node: str = "gpu-node-1",
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The VirtualMachineInstance KubeVirt makes from a VirtualMachine (its template's labels
    and spec, owned by the machine), with the status virt-controller writes in `phase`."""
    meta = machine["metadata"]
    template = machine["spec"]["template"]
    status: dict[str, Any] = {"phase": phase}
    if phase not in ("Pending", "Scheduling"):
        status["nodeName"] = node
    status["conditions"] = conditions or [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now()}
    ]
    if phase == "Running":
        status["phaseTransitionTimestamps"] = [
            {"phase": "Running", "phaseTransitionTimestamp": now()}
        ]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": copy.deepcopy(template["metadata"]["labels"]),
            "annotations": copy.deepcopy(template["metadata"].get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "name": meta["name"],
                    "uid": meta.get("uid", "0"),
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": status,
    }


def launcher_pod(
    instance: dict[str, Any], *, ready: bool = True, pull_error: str = ""
) -> dict[str, Any]:
    """The virt-launcher pod of an instance (its labels, KubeVirt's vm.kubevirt.io/name); with
    `pull_error` (ErrImagePull, ImagePullBackOff) its container disk cannot be pulled."""
    meta = instance["metadata"]
    disk = next(v for v in instance["spec"]["volumes"] if "containerDisk" in v)
    container: dict[str, Any] = {"name": "volumerootdisk", "ready": ready and not pull_error}
    if pull_error:
        container["state"] = {
            "waiting": {
                "reason": pull_error,
                "message": f'Back-off pulling image "{disk["containerDisk"]["image"]}": not found',
            }
        }
    else:
        container["state"] = {"running": {"startedAt": now()}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{meta['name']}-abcde",
            "namespace": meta["namespace"],
            "labels": {**meta["labels"], "vm.kubevirt.io/name": meta["name"]},
        },
        "spec": {
            "containers": [
                {"name": "compute"},
                {"name": "volumerootdisk", "image": disk["containerDisk"]["image"]},
            ]
        },
        "status": {
            "phase": "Pending" if pull_error else "Running",
            "containerStatuses": [container],
        },
    }


def node(name: str, region: str | None, zone: str | None = None) -> dict[str, Any]:
    """A Node as the kubelet and the cloud's node controller register it, with its
    topology labels (none when `region` is None)."""
    labels = {"kubernetes.io/hostname": name}
    if region is not None:
        labels["topology.kubernetes.io/region"] = region
        labels["topology.kubernetes.io/zone"] = zone or f"{region}a"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def kubevirt_cr(*devices: str) -> dict[str, Any]:
    """The KubeVirt CR of the cluster, permitting these PCI devices to pass through."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"pciVendorSelector": "10DE:2330", "resourceName": device}
                        for device in devices
                    ]
                }
            }
        },
    }


def emulator_profile(organization, kube, name: str = "prod", namespace: str = PROD_NAMESPACE):
    """A Kubernetes cluster `name` of the organization on the emulator (`kube`: anything with a
    kubeconfig_path whose context "emulator" reaches it; KServe discovered), and a profile of the
    same name on it that deploys into `namespace`. Returns the profile."""
    cluster = Cluster.objects.create(
        organization=organization,
        name=name,
        backend="kubernetes",
        kubeconfig_path=str(kube.kubeconfig_path),
        context="emulator",
        addons=["kserve"],
    )
    return Profile.objects.create(
        organization=organization, name=name, cluster=cluster, namespace=namespace
    )


@pytest.fixture(name="prod")
def prod_fixture(org, kube) -> Iterator[Cluster]:
    """The cluster "prod" on the emulator, with its profile "prod" (namespace PROD_NAMESPACE);
    the API clients are forgotten before and after, so none reaches an earlier emulator."""
    forget_clients()
    yield emulator_profile(org, kube).cluster
    forget_clients()


__all__ = [
    "PROD_NAMESPACE",
    "emulator_profile",
    "instance_of",
    "kubevirt_cr",
    "launcher_pod",
    "now",
    "predictor_pod",
    "node",
    "prod_fixture",
    "with_status",
]
