"""How replicas scale, in the InferenceService's own terms (Standard deployment mode).

KServe creates and owns the scaler from `serving.kserve.io/autoscalerClass` and the
predictor's `autoScaling` block: class `hpa` makes a HorizontalPodAutoscaler, class `keda` a
KEDA ScaledObject, class `none` a Deployment of exactly minReplicas. So no scaler object is
rendered beside the InferenceService: one owner, deleted with it, never fighting KServe's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import number_text

AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
WAITING_METRIC = "vllm:num_requests_waiting"
# On an InferenceService ServeDeck scaled to zero (scaling.minReplicas 0, idle): the status
# reads Sleeping from it, whoever looks.
SLEEPING_ANNOTATION = "servedeck.io/sleeping"


def autoscaler(
    scaling: Mapping[str, Any],
    name: str,
    namespace: str,
    prometheus_url: str,
    *,
    asleep: bool = False,
) -> tuple[str, dict[str, Any]]:
    """(autoscaler class, predictor fields: minReplicas, maxReplicas, autoScaling).

    minReplicas 0 (scale to zero) runs one replica while awake. `asleep`: the predictor
    scaled to zero, as KServe does it in Standard mode: with autoscalerClass none its
    Deployment's replicas are the predictor's minReplicas, 0 included (any HPA of the
    predictor is deleted), so no pod, and nothing holding a GPU, is left.
    """
    low = max(scaling["minReplicas"], 1)
    high = scaling.get("maxReplicas") or low
    if asleep:
        return "none", {"minReplicas": 0, "maxReplicas": max(high, 1)}
    fields: dict[str, Any] = {"minReplicas": low, "maxReplicas": high}
    metric = scaling.get("metric")
    metric = metric if isinstance(metric, Mapping) else {}
    # Rendered as the manifest says even for a multi-node predictor, which KServe only runs at
    # a fixed count: validate() reports that, instead of the objects silently differing from
    # what the dry run describes.
    if high <= low or not any(v is not None for v in metric.values()):
        return "none", fields
    if metric.get("cpu") is not None:
        fields["autoScaling"] = {"metrics": [_cpu_metric(metric["cpu"])]}
        return "hpa", fields
    fields["autoScaling"] = {
        "metrics": [_waiting_metric(metric["requestsWaiting"], name, namespace, prometheus_url)]
    }
    return "keda", fields


def _cpu_metric(percent: int) -> dict[str, Any]:
    return {
        "type": "Resource",
        "resource": {
            "name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": percent},
        },
    }


def _waiting_metric(
    target: float, name: str, namespace: str, prometheus_url: str
) -> dict[str, Any]:
    # vLLM labels its metrics with the served model name, which KServe sets to the
    # InferenceService name. KEDA's Prometheus trigger divides the sum by the replica count
    # (AverageValue), so the threshold is waiting requests per replica, as docs/manifest.md means.
    query = f'sum({WAITING_METRIC}{{namespace="{namespace}",model_name="{name}"}})'
    return {
        "type": "External",
        "external": {
            "metric": {"backend": "prometheus", "serverAddress": prometheus_url, "query": query},
            "target": {"type": "Value", "value": number_text(target)},
        },
    }
