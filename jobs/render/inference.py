"""The KServe InferenceService of an application: built from the model fields, or taken from
the user's own (source.type YAML) with our labels, name and namespace merged in.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from jobs.storage_access import BUCKET_SCHEMES, IMAGE_SCHEMES

from .common import KSERVE_API, QUEUE_LABEL, RenderError, metadata
from .engine import container_args, container_env
from .placement import container_resources, gpu_of, node_affinity
from .runtimes import Runtime, choose_runtime
from .scaling import AUTOSCALER_CLASS, SLEEPING_ANNOTATION, autoscaler
from .target import RenderTarget

DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
# KServe's name for plain Deployments + Services + HPA/KEDA, without Knative; the older name
# "RawDeployment" is still read but deprecated.
STANDARD = "Standard"
NODE_GROUP_ANNOTATION = "serving.kserve.io/nodegroup"
# The Secret KServe's storage initializer reads credentials from (its inferenceservice-config
# `storageSecretNameAnnotation`); an HF_TOKEN key there is what downloads a gated hf:// model.
STORAGE_SECRET_ANNOTATION = "serving.kserve.io/storageSecretName"
WORKER_CONTAINER = "worker-container"
PROTOCOLS = {"V1": "v1", "V2": "v2"}  # OpenAI needs none: the runtimes serve it alongside
# Set by the API server, never by a manifest: dropped from a pasted InferenceService.
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
)


def model_inference_service(
    name: str,
    namespace: str,
    labels: dict[str, str],
    model: Mapping[str, Any],
    target: RenderTarget,
    *,
    asleep: bool = False,
) -> tuple[dict[str, Any], Runtime]:
    resources = model["resources"]
    on_gpu = gpu_of(resources) is not None
    multinode = resources.get("nodesPerReplica", 1) > 1
    runtime = choose_runtime(name, model["runtime"]["engine"], model["format"], multinode)
    scaler, replica_fields = autoscaler(
        model["scaling"], name, namespace, target.prometheus_url, asleep=asleep
    )

    queue = (model.get("queue") or {}).get("name")
    isvc_labels = {**labels, QUEUE_LABEL: queue} if queue else dict(labels)
    annotations = {DEPLOYMENT_MODE: STANDARD, AUTOSCALER_CLASS: scaler}
    if asleep:
        annotations[SLEEPING_ANNOTATION] = "true"
    cache = model.get("cache") or {}
    if cache.get("enabled"):
        annotations[NODE_GROUP_ANNOTATION] = cache["nodeGroup"]
    scheme = model["uri"].partition("://")[0]
    secret = target.hf_secret_name if scheme == "hf" else None
    if secret:
        annotations[STORAGE_SECRET_ANNOTATION] = secret
    elif scheme in BUCKET_SCHEMES and target.storage_secret:
        # KServe's storage initializer reads the bucket's credentials and its endpoint, region
        # and TLS settings (the serving.kserve.io/s3-* annotations) from this Secret.
        annotations[STORAGE_SECRET_ANNOTATION] = target.storage_secret

    predictor: dict[str, Any] = {"model": _model_spec(model, runtime, on_gpu, secret)}
    if target.storage_service_account:
        # The pods run as it: KServe reads the storage Secrets it lists, and a cloud role bound
        # to it (IRSA, Workload Identity) reads the bucket without any key.
        predictor["serviceAccountName"] = target.storage_service_account
    if scheme in IMAGE_SCHEMES and target.image_pull_secret:
        # A modelcar: the model image runs beside the server, pulled with this Secret.
        predictor["imagePullSecrets"] = [{"name": target.image_pull_secret}]
    affinity = node_affinity(resources, target)
    if multinode:
        predictor["workerSpec"] = _worker_spec(model, resources, affinity)
    if affinity is not None:
        predictor["affinity"] = affinity
    predictor.update(replica_fields)
    isvc = {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": metadata(name, namespace, isvc_labels, annotations),
        "spec": {"predictor": predictor},
    }
    return isvc, runtime


def _model_spec(
    model: Mapping[str, Any], runtime: Runtime, on_gpu: bool, secret: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelFormat": {"name": runtime.model_format},
        "runtime": runtime.name,
    }
    protocol = PROTOCOLS.get((model.get("serving") or {}).get("apiFormat"))
    if protocol is not None:
        spec["protocolVersion"] = protocol
    spec["storageUri"] = model["uri"]
    args = container_args(model, runtime, on_gpu)
    if args:
        spec["args"] = args
    env = container_env(model, runtime, on_gpu, secret)
    if env:
        spec["env"] = env
    spec["resources"] = container_resources(model["resources"])
    return spec


def _worker_spec(
    model: Mapping[str, Any], resources: Mapping[str, Any], affinity: dict[str, Any] | None
) -> dict[str, Any]:
    """Every node after the head: KServe runs nodesPerReplica - 1 workers, each holding
    tensorParallelSize GPUs, and passes both sizes to the runtime."""
    engine = model.get("engine") or {}
    gpu = gpu_of(resources) or {}
    spec: dict[str, Any] = {
        "pipelineParallelSize": engine.get("pipelineParallelSize") or resources["nodesPerReplica"],
        "tensorParallelSize": engine.get("tensorParallelSize") or gpu.get("countPerReplica", 1),
        "containers": [{"name": WORKER_CONTAINER, "resources": container_resources(resources)}],
    }
    if affinity is not None:
        # The workers need the same GPUs as the head; spreading them over other kinds would
        # leave a replica that cannot start.
        spec["affinity"] = copy.deepcopy(affinity)
    return spec


def yaml_inference_service(
    isvc: Any,
    name: str,
    namespace: str,
    labels: dict[str, str],
) -> dict[str, Any]:
    """The user's InferenceService as written, under the application's name and namespace
    (clients and the gateway reach it as <name>-predictor), with our labels merged in."""
    if not isinstance(isvc, Mapping) or not isinstance(isvc.get("spec"), Mapping):
        raise RenderError(
            "spec.source.inferenceService: not an InferenceService with a spec; parse the "
            "manifest with jobs.manifest.parse and render only one without refusals"
        )
    given = copy.deepcopy(dict(isvc))
    given.pop("status", None)
    meta = given.get("metadata") if isinstance(given.get("metadata"), Mapping) else {}
    meta = {k: v for k, v in meta.items() if k not in SERVER_METADATA}
    user_labels = meta.pop("labels", None) or {}
    user_annotations = meta.pop("annotations", None) or {}
    meta.pop("name", None)
    meta.pop("namespace", None)
    # Standard mode unless the user chose another: the platform reads Deployments for status.
    annotations = {DEPLOYMENT_MODE: STANDARD, **user_annotations}
    merged = metadata(name, namespace, {**user_labels, **labels}, annotations)
    merged.update(meta)
    out = {"apiVersion": given.pop("apiVersion"), "kind": given.pop("kind")}
    given.pop("metadata", None)
    out["metadata"] = merged
    out.update(given)
    return out
