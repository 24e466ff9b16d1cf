"""Kubernetes objects as KServe and the kubelet write them, for tests and benches that put them
into the API emulator (tests/fakes/kube.py), and a cluster on that emulator to follow them on.

    kube.put(with_status(kube.get("InferenceService", "bge-embed", "models"), ready=True))
    kube.put(predictor_pod("bge-embed", "models", ready=False, oom=True))

The `prod` fixture (import `prod_fixture`, as with the emulator's own fixtures) is a Kubernetes
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
    "now",
    "predictor_pod",
    "prod_fixture",
    "with_status",
]
