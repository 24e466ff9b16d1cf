"""Property test: any single-node manifest that manifest.parse accepts renders to objects the
CRDs and KServe's rules accept, deterministically, without changing the manifest."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jobs.manifest import parse
from jobs.render import render, to_yaml, validate, with_revision

try:
    from .test_render import CATALOG, CTX, DOMAIN, TARGETS, document
except ImportError:
    from test_render import CATALOG, CTX, DOMAIN, TARGETS, document

NVIDIA = [k["name"] for k in CATALOG if k["vendor"] == "nvidia"]
PREDICTIVE = {  # format -> protocol its default runtime speaks
    "SKLearn": "V1",
    "XGBoost": "V2",
    "LightGBM": "V1",
    "TensorFlow": "V1",
    "PyTorch": "V2",
    "ONNX": "V2",
    "MLflow": "V2",
    "PMML": "V1",
    "Paddle": "V2",
}


@st.composite
def gpu_block(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"countPerReplica": draw(st.integers(1, 8))}
    model = draw(st.sampled_from([None, *NVIDIA]))
    if model is not None:
        spec["model"] = model
    capacity = draw(st.sampled_from([None, "OnDemand", "Spot", "Any"]))
    if capacity is not None:
        spec["capacityType"] = capacity
    return {"resources.accelerator": {"gpu": spec}}


@st.composite
def scaling_block(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(1, 4))
    high = low + draw(st.integers(0, 4))
    scaling: dict[str, Any] = {"minReplicas": low, "maxReplicas": high}
    if high > low:
        metric = draw(
            st.sampled_from(
                [
                    None,
                    {"cpu": draw(st.integers(1, 100))},
                    {"requestsWaiting": draw(st.integers(1, 20))},
                ]  # fmt: skip
            )
        )
        if metric is not None:
            scaling["metric"] = metric
    return {"scaling": scaling}


@st.composite
def generative(draw: st.DrawFn) -> dict[str, Any]:
    changes: dict[str, Any] = draw(st.one_of(st.just({}), gpu_block()))
    if draw(st.booleans()):
        changes["serving.maxContextTokens"] = draw(st.integers(256, 32768))
    if draw(st.booleans()):
        changes["serving.maxConcurrentRequests"] = draw(st.integers(1, 256))
    if draw(st.booleans()):
        changes["serving.multimodal"] = {"maxImagesPerPrompt": draw(st.integers(1, 16))}
    if draw(st.booleans()):
        changes["engine.extraArgs"] = draw(
            st.lists(st.sampled_from(["--enforce-eager", "--seed=1", "--trust-remote-code"]))
        )
    if draw(st.booleans()):
        changes["uri"] = "hf://nvidia/parakeet-tdt-0.6b-v3"
    return changes


@st.composite
def predictive(draw: st.DrawFn) -> dict[str, Any]:
    fmt = draw(st.sampled_from(sorted(PREDICTIVE)))
    uri = draw(st.sampled_from(["s3://models/m", "gs://models-bucket/m", "pvc://store/m"]))
    return {"uri": uri, "format": fmt, "serving.apiFormat": PREDICTIVE[fmt]}


@st.composite
def manifests(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    changes = draw(st.one_of(generative(), predictive()))
    changes.update(draw(scaling_block()))
    if draw(st.booleans()):
        changes["queue.name"] = "gpu-queue"
    if draw(st.booleans()):
        changes["spec.access"] = DOMAIN
    if draw(st.booleans()) and changes.get("uri", "hf://").startswith(("hf://", "s3://")):
        changes["cache"] = {"enabled": True, "size": f"{draw(st.integers(1, 400))}Gi"}
    profile = draw(st.sampled_from(["prod", "bare"]))
    return changes, profile


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(manifests())
def test_every_accepted_manifest_renders_to_valid_objects(case):
    changes, profile = case
    result = parse(document(changes, profile), CTX)
    assume(result.ok)
    manifest = result.manifest
    before = copy.deepcopy(manifest)
    objects = render(manifest, TARGETS[profile], revision=1)
    assert validate(objects) == []
    assert manifest == before
    assert to_yaml(render(manifest, TARGETS[profile], revision=1)) == to_yaml(objects)
    # A deploy stamps what its dry run rendered rather than render again: the same objects.
    dry_run = render(manifest, TARGETS[profile])
    assert to_yaml(with_revision(dry_run, 1)) == to_yaml(objects)
    assert to_yaml(dry_run) == to_yaml(render(manifest, TARGETS[profile]))  # left unstamped
