"""Plain-language answers about a filled-in manifest for the dry run: is it generative,
which runtime serves it, how it scales. Tolerant of any input (never raises).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checks import DEFAULT_SCALE_TO_ZERO_AFTER
from .problems import show
from .schema import ENGINES, GENERATIVE_FORMATS, INSTALLED_RUNTIMES
from .view import dig

ENGINE_TITLES = {
    "vllm": "vLLM",
    "parakeet": "Parakeet speech-to-text",
    "triton": "NVIDIA Triton",
    "torchserve": "TorchServe",
    "tensorflow": "TensorFlow Serving",
    "sklearn": "scikit-learn server",
    "xgboost": "XGBoost server",
    "lightgbm": "LightGBM server",
    "mlserver": "MLServer",
    "kserve-pmmlserver": "PMML server",
    "kserve-paddleserver": "Paddle server",
}
assert set(ENGINES) <= set(ENGINE_TITLES)


def _model(manifest: Any) -> Mapping[str, Any] | None:
    model = dig(manifest, "spec", "source", "model")
    return model if isinstance(model, Mapping) else None


def _is_yaml(manifest: Any) -> bool:
    return dig(manifest, "spec", "source", "type") == "YAML"


def is_generative(manifest: Any) -> bool:
    """A vLLM-format model (parakeet included); a raw InferenceService whose predictor names
    the vLLM or huggingface format counts as generative too."""
    if _is_yaml(manifest):
        isvc = dig(manifest, "spec", "source", "inferenceService")
        name = dig(isvc, "spec", "predictor", "model", "modelFormat", "name")
        return isinstance(name, str) and name.lower() in ("vllm", "huggingface")
    return dig(_model(manifest), "format") in GENERATIVE_FORMATS


def runtime_of(manifest: Any) -> str:
    """Which runtime serves it, e.g. "vLLM (vllm runtime)"."""
    if _is_yaml(manifest):
        isvc = dig(manifest, "spec", "source", "inferenceService")
        runtime = dig(isvc, "spec", "predictor", "model", "runtime")
        fmt = dig(isvc, "spec", "predictor", "model", "modelFormat", "name")
        if isinstance(runtime, str):
            return f"{runtime} runtime, as written in source.inferenceService"
        if isinstance(fmt, str):
            return f"the cluster's runtime for {fmt}, as written in source.inferenceService"
        return "as written in source.inferenceService"
    engine = dig(_model(manifest), "runtime", "engine")
    if not isinstance(engine, str):
        return "unknown (no runtime could be chosen)"
    if engine in INSTALLED_RUNTIMES:
        text = f"{ENGINE_TITLES[engine]} ({engine} runtime)"
    else:
        text = f"{engine} (a serving runtime on the cluster, not installed by the platform)"
    if dig(_model(manifest), "runtime", "isolation") == "VirtualMachine":
        text += ", in KubeVirt virtual machines"
    return text


def scaling_of(manifest: Any) -> str:
    """How it scales, e.g. "fixed at 2 replicas" or "autoscales 1–4 replicas on cpu 80%"."""
    if _is_yaml(manifest):
        return "as written in source.inferenceService"
    scaling = dig(_model(manifest), "scaling")
    low, high = dig(scaling, "minReplicas"), dig(scaling, "maxReplicas")
    if not _whole(low):
        return "unknown (minReplicas is not set to a whole number)"
    if low == 0:  # scale to zero: awake it runs as with minReplicas 1
        after = dig(scaling, "scaleToZeroAfter")
        after = after if isinstance(after, str) else DEFAULT_SCALE_TO_ZERO_AFTER
        awake = _awake_scaling(manifest, 1, high if _whole(high) else 1)
        return (
            f"{awake} while awake; sleeps (no replica) after {after} without a request, "
            "and the next request wakes it"
        )
    return _awake_scaling(manifest, low, high if _whole(high) else low)


def _awake_scaling(manifest: Any, low: int, high: int) -> str:
    scaling = dig(_model(manifest), "scaling")
    fixed = f"fixed at {show(low)} replica{'s' if low != 1 else ''}"
    if high <= low:
        return fixed
    nodes = dig(_model(manifest), "resources", "nodesPerReplica")
    if _whole(nodes) and nodes > 1:
        # KServe runs a multi-node predictor with autoscaler none: minReplicas, whatever max says.
        return f"{fixed} (multi-node replicas do not autoscale)"
    span = f"{show(low)}–{show(high)} replicas"
    metric = dig(scaling, "metric")
    if isinstance(metric, Mapping):
        if metric.get("requestsWaiting") is not None:
            return f"autoscales {span} on requestsWaiting {show(metric['requestsWaiting'])}"
        if metric.get("cpu") is not None:
            return f"autoscales {span} on cpu {show(metric['cpu'])}%"
    on_gpu = dig(_model(manifest), "resources", "accelerator", "gpu") is not None
    where = "on GPU" if on_gpu else "chosen"
    return f"{span}, no autoscaler {where} (stays at {show(low)})"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sleeping_of(manifest: Any, backend: str) -> str:
    """What minReplicas 0 (scale to zero) means on the profile's target, `backend` "local" or
    "kubernetes"; "" for a model that never sleeps."""
    scaling = dig(_model(manifest), "scaling")
    if _is_yaml(manifest) or dig(scaling, "minReplicas") != 0:
        return ""
    after = dig(scaling, "scaleToZeroAfter")
    after = after if isinstance(after, str) else DEFAULT_SCALE_TO_ZERO_AFTER
    idle = f"After {after} without a request through the gateway"
    woken = (
        "The next request through the gateway wakes it; it and the requests that follow are "
        "held until the model is Running (streams get progress comments)."
    )
    if backend == "kubernetes":
        return (
            f"{idle}, the reconciler applies its InferenceService again with "
            "spec.predictor.minReplicas 0 and serving.kserve.io/autoscalerClass none: in "
            "KServe's Standard (raw deployment) mode that sets the predictor's Deployment to "
            "zero replicas, so no pod runs and none holds a GPU; the Service stays, its "
            "EndpointSlices empty, and the phase reads Sleeping. "
            f"{woken[:-1]}, once the predictor's ready endpoints are in its EndpointSlices. "
            "The cluster needs KServe 0.15.1 or later in Standard mode (it sets the "
            "Deployment's replicas from minReplicas, 0 included, for autoscalerClass none), "
            "the console's Role to patch InferenceServices and to list and watch "
            "EndpointSlices in the namespace, and callers to come through the gateway: a "
            "request sent straight to the predictor's Service while it sleeps finds no "
            "endpoint and does not wake it."
        )
    return (
        f"{idle}, its model server processes on this machine stop and their memory is freed, "
        "and the phase reads Sleeping. "
        f"{woken} When memory is short as it wakes, other idle models with minReplicas 0 are "
        "put to sleep first; a model that must stay up never is."
    )
