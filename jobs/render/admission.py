"""What KServe's admission webhook and controller refuse that no schema says: a mirror of the
rules a rendered InferenceService can break (KServe v1beta1 inference_service_validation.go
and the runtime lookup of the predictor reconciler), and Kubernetes' own metadata rules.

Each check returns plain messages; validate.py adds which object they are about.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from jobs.manifest.view import dig

ISVC_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
ANNOTATIONS_MAX_BYTES = 256 * 1024

AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")
MULTINODE_STORAGE = ("pvc", "oci")
PREDICTOR_IMPLEMENTATIONS = (
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- metadata (every object) -----------------------------------------------------------------


def metadata_problems(obj: Mapping[str, Any], namespaced: bool | None) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: missing; every object needs a name"]
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    namespace = meta.get("namespace")
    if namespaced is True and namespace is None:
        problems.append("metadata.namespace: missing for a namespaced kind")
    if namespaced is False and namespace is not None:
        problems.append(f"metadata.namespace: {namespace!r} set on a cluster-scoped kind")
    if namespace is not None and (
        not isinstance(namespace, str) or len(namespace) > 63 or not DNS_LABEL.fullmatch(namespace)
    ):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    problems.extend(_label_problems(meta.get("labels")))
    problems.extend(_annotation_problems(meta.get("annotations")))
    return problems


def _key_problem(where: str, key: Any) -> str | None:
    if not isinstance(key, str):
        return f"{where}: key {key!r} is not text"
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{where}: key {key!r} has a prefix that is not a DNS-1123 subdomain"
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        return f"{where}: key {key!r} is not a qualified name (63 characters at most)"
    return None


def _label_problems(labels: Any) -> list[str]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return ["metadata.labels: not a mapping"]
    problems = []
    for key, value in labels.items():
        problem = _key_problem("metadata.labels", key)
        if problem:
            problems.append(problem)
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            problems.append(
                f"metadata.labels.{key}: {value!r} is not a label value (text of at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
            )
    return problems


def _annotation_problems(annotations: Any) -> list[str]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return ["metadata.annotations: not a mapping"]
    problems = []
    size = 0
    for key, value in annotations.items():
        problem = _key_problem("metadata.annotations", key)
        if problem:
            problems.append(problem)
        if not isinstance(value, str):
            problems.append(f"metadata.annotations.{key}: {value!r} is not text")
        size += len(str(key).encode()) + len(str(value).encode())
    if size > ANNOTATIONS_MAX_BYTES:
        problems.append(f"metadata.annotations: {size} bytes, more than {ANNOTATIONS_MAX_BYTES}")
    return problems


# --- InferenceService ------------------------------------------------------------------------


def inference_service_problems(isvc: Mapping[str, Any], runtimes: RuntimeIndex) -> list[str]:
    problems = []
    name = dig(isvc, "metadata", "name")
    if isinstance(name, str) and not ISVC_NAME.fullmatch(name):
        problems.append(
            f"metadata.name: {name!r} is refused by KServe: an InferenceService name starts "
            "with a letter and has only lowercase letters, digits and '-'"
        )
    annotations = dig(isvc, "metadata", "annotations") or {}
    scaler = annotations.get("serving.kserve.io/autoscalerClass")
    if scaler is not None and scaler not in AUTOSCALER_CLASSES:
        problems.append(
            f"metadata.annotations: autoscalerClass {scaler!r} is not one of "
            f"{', '.join(AUTOSCALER_CLASSES)}"
        )
    predictor = dig(isvc, "spec", "predictor")
    if not isinstance(predictor, Mapping):
        return problems
    problems.extend(_implementation_problems(predictor))
    problems.extend(_replica_problems(predictor))
    problems.extend(_scaling_problems(predictor, annotations, scaler))
    problems.extend(_multinode_problems(predictor, scaler))
    namespace = dig(isvc, "metadata", "namespace")
    problems.extend(runtimes.problems(predictor.get("model"), namespace))
    return problems


def _implementation_problems(predictor: Mapping[str, Any]) -> list[str]:
    chosen = [k for k in PREDICTOR_IMPLEMENTATIONS if predictor.get(k) is not None]
    if predictor.get("containers"):
        chosen.append("containers")
    if len(chosen) != 1:
        return [
            f"spec.predictor: sets {', '.join(chosen) or 'no implementation'}; KServe accepts "
            "exactly one of model, a framework field, or containers"
        ]
    return []


def _replica_problems(predictor: Mapping[str, Any]) -> list[str]:
    low, high = predictor.get("minReplicas"), predictor.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and high and low > high:
        return [f"spec.predictor.minReplicas: {low} is above maxReplicas {high}"]
    return []


def _scaling_problems(
    predictor: Mapping[str, Any], annotations: Mapping[str, Any], scaler: Any
) -> list[str]:
    if annotations.get("serving.kserve.io/deploymentMode") != "Standard":
        return []
    metrics = dig(predictor, "autoScaling", "metrics") or []
    problems = []
    for index, metric in enumerate(metrics if isinstance(metrics, list) else []):
        path = f"spec.predictor.autoScaling.metrics[{index}]"
        kind = metric.get("type") if isinstance(metric, Mapping) else None
        if scaler == "hpa" and kind != "Resource":
            problems.append(f"{path}.type: {kind!r}; the hpa autoscaler takes only Resource")
        if scaler == "keda" and kind == "External":
            external = metric.get("external") or {}
            if not dig(external, "metric", "query"):
                problems.append(f"{path}.external.metric.query: empty; KEDA needs a query")
            if dig(external, "target", "value") is None:
                problems.append(f"{path}.external.target.value: missing; KEDA needs a threshold")
    if scaler == "keda" and predictor.get("scaleMetric") is not None:
        problems.append("spec.predictor.scaleMetric: not supported with the keda autoscaler")
    return problems


def _multinode_problems(predictor: Mapping[str, Any], scaler: Any) -> list[str]:
    worker = predictor.get("workerSpec")
    if not isinstance(worker, Mapping):
        return []
    problems = []
    if len(worker.get("containers") or []) > 1:
        problems.append("spec.predictor.workerSpec.containers: KServe accepts one container")
    for key in ("pipelineParallelSize", "tensorParallelSize"):
        value = worker.get(key)
        if isinstance(value, int) and value < 1:
            problems.append(f"spec.predictor.workerSpec.{key}: {value} is below 1")
    model = predictor.get("model")
    if isinstance(model, Mapping):
        uri = model.get("storageUri")
        scheme = uri.split("://", 1)[0] if isinstance(uri, str) and "://" in uri else None
        if scheme not in MULTINODE_STORAGE:
            problems.append(
                f"spec.predictor.model.storageUri: {uri!r}; KServe serves a multi-node model "
                "only from pvc:// or oci:// storage"
            )
        if scaler != "none":
            problems.append(
                f"metadata.annotations: autoscalerClass {scaler!r}; KServe requires 'none' for a "
                "multi-node predictor"
            )
        names = {e.get("name") for e in model.get("env") or [] if isinstance(e, Mapping)}
        for env in sorted({"TENSOR_PARALLEL_SIZE", "PIPELINE_PARALLEL_SIZE"} & names):
            problems.append(f"spec.predictor.model.env: {env} is set by KServe from workerSpec")
    return problems


# --- which runtime serves the predictor ------------------------------------------------------


class RuntimeIndex:
    """The runtimes a predictor may name: KServe's ClusterServingRuntimes (reference copy)
    and the ServingRuntimes rendered alongside, with the formats and protocols each takes."""

    def __init__(self, cluster: Mapping[str, Mapping[str, Any]], objects: Iterable[Any]) -> None:
        self.cluster = cluster
        self.namespaced: dict[tuple[Any, Any], Mapping[str, Any]] = {}
        for obj in objects:
            if isinstance(obj, Mapping) and obj.get("kind") == "ServingRuntime":
                key = (dig(obj, "metadata", "namespace"), dig(obj, "metadata", "name"))
                self.namespaced[key] = obj.get("spec") or {}

    def problems(self, model: Any, namespace: Any) -> list[str]:
        if not isinstance(model, Mapping) or not isinstance(model.get("runtime"), str):
            return []
        name = model["runtime"]
        spec = self.namespaced.get((namespace, name)) or self.cluster.get(name)
        if spec is None:
            return []  # a runtime of the user's on the cluster: only the cluster knows it
        problems = []
        fmt = dig(model, "modelFormat", "name")
        if fmt is None:
            return []  # the schema already reports the missing modelFormat.name
        formats = {f.get("name") for f in spec.get("supportedModelFormats") or []}
        if fmt not in formats:
            problems.append(
                f"spec.predictor.model.modelFormat.name: {fmt!r}; runtime {name} supports "
                f"{', '.join(sorted(str(f) for f in formats))}"
            )
        protocol = model.get("protocolVersion")
        protocols = spec.get("protocolVersions")
        if protocol is not None and protocols and protocol not in protocols:
            problems.append(
                f"spec.predictor.model.protocolVersion: {protocol!r}; runtime {name} speaks "
                f"{', '.join(protocols)}"
            )
        return problems


@lru_cache(maxsize=8)
def cluster_runtimes(directory: Path) -> dict[str, Mapping[str, Any]]:
    """name -> spec of each ClusterServingRuntime file in the directory (empty if none)."""
    found: dict[str, Mapping[str, Any]] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.yaml")):
        with path.open(encoding="utf-8") as handle:
            doc = yaml.load(handle, Loader=_Loader)  # noqa: S506 - a safe loader
        if isinstance(doc, Mapping) and doc.get("kind") == "ClusterServingRuntime":
            found[dig(doc, "metadata", "name")] = doc.get("spec") or {}
    return found
