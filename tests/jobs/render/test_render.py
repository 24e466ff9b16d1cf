"""The KServe renderer: a table of manifests (every runtime and format, CPU and each GPU kind,
capacity types, scaling choices, queue, cache, multi-node, Domain exposure, multimodal limits,
YAML source) parsed by jobs.manifest.parse, rendered, and validated against KServe's real CRD
schemas with zero problems, deterministically; the shared helpers of test_render_*.py.
Golden field checks are in test_render_fields.py, the validator's own in test_render_validate.py.

Pure data: no database, no cluster. The CRDs are read from ../shared/reference/kserve/crd.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from jobs.machine_catalog import default_machine_catalog
from jobs.manifest import ManifestContext, ProfileFacts, parse
from jobs.render import (
    APP_LABEL,
    RenderTarget,
    render,
    to_yaml,
    validate,
)

COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"
GIB = 2**30
AMD_KIND = {
    "name": "mi300x",
    "vendor": "amd",
    "gpuMemory": "196608Mi",
    "gpusPerNode": 8,
    "nodeCpu": "192",
    "nodeMemory": "2048Gi",
    "nodeLabels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
}
CATALOG = (*default_machine_catalog(), AMD_KIND)
GPU_KINDS = tuple(kind["name"] for kind in CATALOG if kind["vendor"] == "nvidia")
ALL_ADDONS = frozenset(
    {"kserve", "keda", "kueue", "gatewayApi", "certManager", "localModelCache", "kubevirt"}
)
NAMESPACES = {"prod": "ml-serving", "bare": "bare-ns"}

CTX = ManifestContext(
    profiles={
        "prod": ProfileFacts(
            name="prod",
            namespace="ml-serving",
            machine_catalog=CATALOG,
            addons=ALL_ADDONS,
            queues=("gpu-queue", "cpu-queue"),
            cache_node_groups={"gpu-l4": 500 * GIB},
        ),
        # A plain KServe cluster: no KEDA, so a CPU range defaults to cpu: 80.
        "bare": ProfileFacts(
            name="bare",
            namespace="bare-ns",
            machine_catalog=CATALOG,
            addons=frozenset({"kserve"}),
        ),
    },
    verified_domains=frozenset({"models.example.com"}),
    access_policies=frozenset({"partners"}),
)
TARGETS = {
    "prod": RenderTarget(
        namespace="ml-serving",
        machine_catalog=CATALOG,
        addons=ALL_ADDONS,
        hf_token_ref="secret/hf-token",
    ),
    "bare": RenderTarget(
        namespace="bare-ns", machine_catalog=CATALOG, addons=frozenset({"kserve"})
    ),
}


def document(changes: dict[str, Any], profile: str = "prod", name: str = "app") -> dict:
    """An Application with dotted-path changes; keys without "spec." are under the model."""
    doc: dict[str, Any] = {
        "apiVersion": "servedeck.io/v1",
        "kind": "Application",
        "spec": {
            "name": name,
            "profileName": profile,
            "source": {"type": "Model", "model": {"uri": f"hf://Qwen/Qwen3-8B:{COMMIT}"}},
        },
    }
    for dotted, value in changes.items():
        path = dotted if dotted.startswith("spec.") else f"spec.source.model.{dotted}"
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return doc


def filled(changes: dict[str, Any], profile: str = "prod", name: str = "app") -> dict:
    result = parse(document(changes, profile, name), CTX)
    assert result.ok, [str(p) for p in result.refusals]
    return result.manifest


def build(
    changes: dict[str, Any], profile: str = "prod", target: RenderTarget | None = None, **kw: Any
) -> list[dict]:
    return render(filled(changes, profile), target or TARGETS[profile], **kw)


def kind_of(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def predictor(objects: list[dict]) -> dict:
    return kind_of(objects, "InferenceService")["spec"]["predictor"]


def gpu(model: str | None, count: int = 1, capacity: str | None = None, **more: Any) -> dict:
    spec: dict[str, Any] = {"countPerReplica": count, **more}
    if model is not None:
        spec["model"] = model
    if capacity is not None:
        spec["capacityType"] = capacity
    return {"resources.accelerator": {"gpu": spec}}


YAML_ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {
        "name": "whatever-the-user-wrote",
        "namespace": "elsewhere",
        "uid": "0d6f5c1e-1111-2222-3333-444455556666",
        "resourceVersion": "991",
        "labels": {"team": "search"},
        "annotations": {"serving.kserve.io/autoscalerClass": "none"},
    },
    "spec": {
        "predictor": {
            "canaryTrafficPercent": 10,
            "minReplicas": 2,
            "model": {
                "modelFormat": {"name": "sklearn"},
                "storageUri": "gs://kfserving-examples/models/sklearn/1.0/model",
                "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
            },
        }
    },
    "status": {"url": "http://old"},
}

CAPACITIES = ("OnDemand", "Spot", "Any")
DOMAIN = {"exposure": "Domain", "domain": "models.example.com", "accessPolicy": "partners"}
PARAKEET = "hf://nvidia/parakeet-tdt-0.6b-v3"


def scale(low: int, high: int | None = None, **metric: Any) -> dict[str, Any]:
    scaling: dict[str, Any] = {"minReplicas": low}
    if high is not None:
        scaling["maxReplicas"] = high
    if metric:
        scaling["metric"] = metric
    return {"scaling": scaling}


def predictive(fmt: str, uri: str = "s3://models/m", **more: Any) -> dict[str, Any]:
    return {"uri": uri, "format": fmt, **more}


V2 = {"serving.apiFormat": "V2"}
CASES: list[tuple[str, dict[str, Any], str]] = [
    # vLLM on CPU, the defaults of both profiles
    ("vllm-cpu-shortest", {}, "prod"),
    ("vllm-cpu-bare-shortest", {}, "bare"),
    ("vllm-cpu-range-cpu-default", scale(1, 3), "bare"),
    ("vllm-cpu-sized", {"resources": {"cpu": "4", "memory": "16Gi"}}, "prod"),
    ("vllm-cpu-fractional-cpu", {"resources": {"cpu": 0.5, "memory": 6442450944}}, "bare"),
    ("vllm-cpu-kv-cache", {"serving": {"kvCacheSize": "3Gi"}}, "prod"),
    # vLLM on each NVIDIA GPU kind, capacity types in turn
    *[
        (f"vllm-gpu-{kind}-{CAPACITIES[i % 3]}", gpu(kind, 1, CAPACITIES[i % 3]), "prod")
        for i, kind in enumerate(GPU_KINDS)
    ],
    ("vllm-gpu-any-model", gpu(None, 2), "prod"),
    ("vllm-gpu-4x-h100-bf16", {**gpu("h100", 4, "Spot"), "engine.dtype": "bfloat16"}, "prod"),
    (
        "vllm-gpu-serving-fields",
        {
            **gpu("a100-80gb", 2, "OnDemand"),
            "serving.maxContextTokens": 8192,
            "serving.kvCacheSize": "20Gi",
            "serving.maxConcurrentRequests": 32,
            "engine.quantization": "awq",
            "engine.reasoningParser": "qwen3",
            "engine.toolCallParser": "hermes",
        },
        "prod",
    ),
    (
        "vllm-multimodal",
        {
            **gpu("l40s", 1),
            "serving.multimodal": {
                "maxImagesPerPrompt": 4,
                "maxVideosPerPrompt": 1,
                "maxAudioClipsPerPrompt": 2,
            },
        },
        "prod",
    ),
    ("vllm-extra-args", {**gpu("l4"), "engine.extraArgs": ["--enforce-eager"]}, "prod"),
    ("vllm-api-v2", V2, "prod"),
    # scaling choices
    ("scaling-fixed-3", scale(3), "prod"),
    ("scaling-cpu-70", scale(1, 4, cpu=70), "prod"),
    ("scaling-keda-default", {**gpu("l4"), **scale(1, 5)}, "prod"),
    ("scaling-keda-fractional", {**gpu("h100"), **scale(2, 8, requestsWaiting=1.5)}, "prod"),
    ("scaling-gpu-range-no-keda", {**gpu("l4"), **scale(1, 2)}, "bare"),
    # queue, cache, exposure
    ("queue", {**gpu("l4"), "queue.name": "gpu-queue"}, "prod"),
    ("cache", {**gpu("l4"), "cache": {"enabled": True, "size": "17Gi"}}, "prod"),
    ("domain", {"spec.access": DOMAIN}, "prod"),
    # multi-node: KServe serves it from pvc:// or oci:// only, at a fixed count
    (
        "multinode-pvc",
        {
            "uri": "pvc://models-pvc/llama-3.1-405b",
            "format": "vLLM",
            **gpu("h100", 8, "OnDemand"),
            "resources.nodesPerReplica": 2,
            "resources.cpu": "24",
            "resources.memory": "512Gi",
        },
        "prod",
    ),
    (
        "multinode-oci-queue",
        {
            "uri": "oci://registry.example.com/models/llama:3.1",
            "format": "vLLM",
            **gpu("a100-80gb", 4),
            "resources.nodesPerReplica": 4,
            "queue.name": "gpu-queue",
            **scale(2),
        },
        "prod",
    ),
    # speech-to-text
    ("parakeet-cpu", {"uri": PARAKEET}, "prod"),
    ("parakeet-gpu", {"uri": PARAKEET, **gpu("t4")}, "bare"),
    # predictive formats on the runtimes KServe installs (mlserver and triton speak V2 only)
    ("sklearn", predictive("SKLearn", "s3://models/iris/v1"), "prod"),
    ("sklearn-s3-version", predictive("SKLearn", "s3://models/iris/m.joblib?versionId=3"), "prod"),
    ("sklearn-on-mlserver", predictive("SKLearn", **{"runtime.engine": "mlserver"}, **V2), "prod"),
    ("xgboost", predictive("XGBoost", "gs://models-bucket/xgb"), "prod"),
    ("lightgbm", predictive("LightGBM", "gs://models-bucket/lgb?generation=1712"), "prod"),
    ("tensorflow", predictive("TensorFlow"), "prod"),
    ("pytorch-torchserve", predictive("PyTorch"), "prod"),
    ("pytorch-on-triton", predictive("PyTorch", **{"runtime.engine": "triton"}, **V2), "prod"),
    ("onnx-triton", predictive("ONNX", **V2), "prod"),
    ("tensorrt-triton-gpu", predictive("TensorRT", **V2, **gpu("l4")), "prod"),
    ("triton", predictive("Triton", "pvc://model-store/triton", **V2), "prod"),
    ("mlflow", predictive("MLflow", **V2), "prod"),
    ("pmml", predictive("PMML", "gs://models-bucket/pmml"), "prod"),
    ("paddle", predictive("Paddle", "https://acct01.blob.core.windows.net/models/pd"), "prod"),
    ("predictive-scaling-cpu", predictive("SKLearn", **scale(1, 3)), "prod"),
    # a serving runtime of the user's
    ("custom-runtime", {"runtime.engine": "my-vllm", "engine.extraArgs": ["--foo=1"]}, "prod"),
    (
        "custom-runtime-amd",
        {"runtime.engine": "vllm-rocm", **gpu("mi300x", 2, vendor="amd")},
        "prod",
    ),
]


@pytest.mark.parametrize(("changes", "profile"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_manifest_renders_to_objects_the_crds_accept(changes, profile):
    objects = build(changes, profile, revision=2)
    assert validate(objects) == []
    namespace = NAMESPACES[profile]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels[APP_LABEL] == "app"
        assert labels["app.kubernetes.io/managed-by"] == "servedeck"
        if obj["kind"] == "LocalModelCache":  # cluster-scoped
            assert "namespace" not in obj["metadata"]
            assert labels["servedeck.io/namespace"] == namespace
        else:
            assert obj["metadata"]["namespace"] == namespace
    isvc = kind_of(objects, "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert isvc["metadata"]["annotations"]["servedeck.io/revision"] == "2"
    assert list(isvc) == ["apiVersion", "kind", "metadata", "spec"]


@pytest.mark.parametrize(("changes", "profile"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rendering_is_deterministic(changes, profile):
    manifest = filled(changes, profile)
    first = to_yaml(render(manifest, TARGETS[profile]))
    again = to_yaml(render(copy.deepcopy(manifest), TARGETS[profile]))
    assert first == again
    assert list(yaml.safe_load_all(first)) == render(manifest, TARGETS[profile])


def test_yaml_source_renders_the_users_inference_service_with_our_metadata():
    manifest = filled({"spec.source": {"type": "YAML", "inferenceService": YAML_ISVC}})
    objects = render(manifest, TARGETS["prod"], revision=7)
    assert validate(objects) == []
    (isvc,) = objects
    assert isvc["metadata"] == {
        "name": "app",
        "namespace": "ml-serving",
        "labels": {
            "team": "search",
            "servedeck.io/application": "app",
            "app.kubernetes.io/managed-by": "servedeck",
        },
        "annotations": {
            "serving.kserve.io/deploymentMode": "Standard",
            "serving.kserve.io/autoscalerClass": "none",
            "servedeck.io/revision": "7",
        },
    }
    assert isvc["spec"] == YAML_ISVC["spec"]
    assert "status" not in isvc
    assert YAML_ISVC["metadata"]["name"] == "whatever-the-user-wrote"  # input untouched


def test_yaml_source_keeps_the_users_deployment_mode():
    isvc = copy.deepcopy(YAML_ISVC)
    isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "Knative"
    manifest = filled({"spec.source": {"type": "YAML", "inferenceService": isvc}})
    (out,) = render(manifest, TARGETS["prod"])
    assert out["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"


# A manifest with every block set, shared by the golden and validator tests.
FULL = {
    "runtime": {"engine": "vllm"},
    "engine": {
        "dtype": "bfloat16",
        "quantization": "fp8",
        "reasoningParser": "deepseek_r1",
        "toolCallParser": "hermes",
        "gpuMemoryUtilization": 0.85,
        "extraArgs": ["--enable-prefix-caching", "--max-num-batched-tokens=8192"],
    },
    "serving": {
        "maxContextTokens": 32768,
        "kvCacheSize": "12Gi",
        "maxConcurrentRequests": 64,
        "multimodal": {"maxVideosPerPrompt": 1, "maxImagesPerPrompt": 4},
    },
    "resources": {
        "cpu": "6",
        "memory": "64Gi",
        "accelerator": {"gpu": {"model": "l4", "countPerReplica": 2, "capacityType": "OnDemand"}},
    },
    "scaling": {"minReplicas": 1, "maxReplicas": 4, "metric": {"requestsWaiting": 3}},
    "queue": {"name": "gpu-queue"},
    "cache": {"enabled": True, "size": "17Gi", "nodeGroup": "gpu-l4"},
}
