"""render(): a filled-in manifest and a RenderTarget in, the Kubernetes objects out.

Pure and deterministic: the same input gives equal objects with the same key order, listed
in the order they are applied (a runtime and the weight cache before the InferenceService that
uses them, the route last).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from jobs.manifest.view import dig

from .common import (
    ORGANIZATION_ANNOTATION,
    ORGANIZATION_LABEL,
    RenderError,
    our_labels,
    quantity_text,
    revision_annotation,
)
from .extras import http_route, local_model_cache
from .inference import model_inference_service, yaml_inference_service
from .kubevirt import vm_objects
from .runtimes import HUGGINGFACE_OPENAI_PREFIX, parakeet_serving_runtime
from .target import RenderTarget, service_ref

GATEWAY_API_ADDON = "gatewayApi"


def render(
    manifest: Mapping[str, Any],
    target: RenderTarget,
    *,
    revision: int | None = None,
    asleep: bool = False,
) -> list[dict[str, Any]]:
    """The objects for one application. `manifest` is what manifest.parse returned with no
    refusals; `revision` (the deploy history number) is written as servedeck.io/revision.
    `asleep`: a model with scaling.minReplicas 0 put to sleep, its predictor scaled to zero
    (scaling.py)."""
    stamp = revision_annotation(revision)
    try:
        objects = _render(manifest, target, asleep)
    except (KeyError, TypeError, AttributeError) as exc:
        raise RenderError(
            f"the manifest is not filled in ({type(exc).__name__}: {exc}); parse it with "
            "jobs.manifest.parse and render only a manifest without refusals"
        ) from exc
    if target.organization:
        # After the objects are made, so that labels from a raw InferenceService cannot claim
        # another organisation.
        for obj in objects:
            obj["metadata"]["labels"][ORGANIZATION_LABEL] = target.organization
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations[ORGANIZATION_ANNOTATION] = target.organization_name or target.organization
    _stamp(objects, stamp)
    return objects


def with_revision(objects: list[dict[str, Any]], revision: int) -> list[dict[str, Any]]:
    """Objects render() made without a revision (the dry run's), as render() makes them for
    `revision`: copies, each stamped servedeck.io/revision. So a deploy hands the backend what
    its dry run rendered instead of rendering the same manifest again."""
    stamp = revision_annotation(revision)
    stamped = copy.deepcopy(objects)
    _stamp(stamped, stamp)
    return stamped


def _stamp(objects: list[dict[str, Any]], stamp: dict[str, str]) -> None:
    # Every object says which deploy revision it came from, not only the InferenceService.
    for obj in objects if stamp else ():
        obj["metadata"].setdefault("annotations", {}).update(stamp)


def _render(
    manifest: Mapping[str, Any], target: RenderTarget, asleep: bool = False
) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    name = spec["name"]
    namespace = spec.get("namespace") or target.namespace
    labels = our_labels(name)
    source = spec["source"]
    objects: list[dict[str, Any]] = []
    if source["type"] == "YAML":
        objects.append(yaml_inference_service(source["inferenceService"], name, namespace, labels))
    else:
        model = source["model"]
        objects.extend(_model_objects(model, name, namespace, labels, target, asleep))
    access = spec.get("access") or {}
    # Without Gateway API on the cluster the console's own gateway serves the domain (it routes
    # by host); an HTTPRoute there would only make the apply fail.
    if access.get("exposure") == "Domain" and GATEWAY_API_ADDON in target.addons:
        try:
            gateway_service = service_ref(target.gateway_service)
        except ValueError as error:
            raise RenderError(
                f"SERVEDECK_GATEWAY_SERVICE: {error}. Ask the operator to set it."
            ) from None
        objects.append(
            http_route(
                name,
                namespace,
                labels,
                access["domain"],
                target.gateway_name,
                target.gateway_namespace,
                gateway_service,
            )
        )
    return objects


def openai_prefix(model: Mapping[str, Any]) -> str | None:
    """KServe's Hugging Face server serves the OpenAI API under /openai (its
    KSERVE_OPENAI_ROUTE_PREFIX); parakeet and the predictive runtimes need none. The gateway
    prepends it when it proxies `/v1/...` to the predictor (Domain exposure included)."""
    engine = dig(model, "runtime", "engine")
    api = dig(model, "serving", "apiFormat")
    return HUGGINGFACE_OPENAI_PREFIX if engine == "vllm" and api == "OpenAI" else None


def _model_objects(
    model: Mapping[str, Any],
    name: str,
    namespace: str,
    labels: dict[str, str],
    target: RenderTarget,
    asleep: bool = False,
) -> list[dict[str, Any]]:
    if dig(model, "runtime", "isolation") == "VirtualMachine":
        return vm_objects(model, name, namespace, labels, target)
    isvc, runtime = model_inference_service(name, namespace, labels, model, target, asleep=asleep)
    objects: list[dict[str, Any]] = []
    if runtime.kind == "parakeet":
        objects.append(parakeet_serving_runtime(name, namespace, labels, target.parakeet_image))
    cache = model.get("cache") or {}
    if cache.get("enabled"):
        size = quantity_text(cache["size"])
        objects.append(
            local_model_cache(name, namespace, labels, model["uri"], size, cache["nodeGroup"])
        )
    objects.append(isvc)
    return objects
