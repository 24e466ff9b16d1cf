"""Every default of docs/manifest.md, filled into the shortest manifests (CPU, GPU, predictive)."""

from __future__ import annotations

import copy

import pytest

from jobs.manifest import ManifestContext, parse, scaling_of

# tests/ may or may not be a package (both layouts are in use); the support module is
# found either way.
try:
    from .manifest_support import (
        COMMIT,
        GPU,
        MULTINODE,
        PARAKEET,
        SHORTEST,
        context,
        get_path,
        m,
        profile,
    )
except ImportError:
    from manifest_support import (
        COMMIT,
        GPU,
        MULTINODE,
        PARAKEET,
        SHORTEST,
        context,
        get_path,
        m,
        profile,
    )

CPU_FILLED = {
    "apiVersion": "servedeck.io/v1",
    "kind": "Application",
    "spec": {
        "name": "bge-embed",
        "profileName": "prod-inference",
        "namespace": "ml-serving",
        "syncType": "Auto",
        "access": {"exposure": "Internal"},
        "source": {
            "type": "Model",
            "model": {
                "uri": "hf://BAAI/bge-m3",
                "format": "vLLM",
                "runtime": {"engine": "vllm", "isolation": "Container"},
                "engine": {
                    "dtype": "auto",
                    "quantization": None,
                    "tensorParallelSize": 1,
                    "pipelineParallelSize": 1,
                    "reasoningParser": None,
                    "toolCallParser": None,
                    "gpuMemoryUtilization": 0.9,
                    "extraArgs": [],
                },
                "serving": {
                    "apiFormat": "OpenAI",
                    "maxContextTokens": None,
                    "kvCacheSize": "1Gi",
                    "maxConcurrentRequests": 2,
                },
                "resources": {"cpu": "1", "memory": "4Gi", "nodesPerReplica": 1},
                "scaling": {"minReplicas": 1, "maxReplicas": 1, "metric": None},
                "queue": {"name": None},
                "cache": {"enabled": False},
            },
        },
    },
}


def test_shortest_manifest_on_cpu_is_filled_with_every_default():
    result = parse(SHORTEST, context())
    assert result.ok
    assert result.manifest == CPU_FILLED
    # Key order is the order of docs/manifest.md, so `get` reads like the spec.
    assert list(result.manifest) == ["apiVersion", "kind", "spec"]
    assert list(result.manifest["spec"]) == [
        "name",
        "profileName",
        "namespace",
        "syncType",
        "access",
        "source",
    ]
    assert list(result.manifest["spec"]["source"]["model"]) == [
        "uri",
        "format",
        "runtime",
        "engine",
        "serving",
        "resources",
        "scaling",
        "queue",
        "cache",
    ]
    assert [p.path for p in result.warnings] == ["spec.source.model.uri"]


def test_shortest_manifest_on_gpu():
    result = parse(m({"resources.accelerator": {"gpu": {"countPerReplica": 2}}}), context())
    assert result.ok, result.refusals
    model = result.manifest["spec"]["source"]["model"]
    assert model["engine"]["tensorParallelSize"] == 2
    assert model["engine"]["pipelineParallelSize"] == 1
    assert model["serving"] == {
        "apiFormat": "OpenAI",
        "maxContextTokens": None,
        "kvCacheSize": None,
        "maxConcurrentRequests": None,
    }
    assert model["resources"] == {
        "cpu": "6",
        "memory": "8Gi",
        "accelerator": {
            "gpu": {"vendor": "nvidia", "model": None, "countPerReplica": 2, "capacityType": "Any"}
        },
        "nodesPerReplica": 1,
    }


def test_shortest_predictive_manifest():
    doc = m({"uri": "s3://models/fraud/model.joblib", "format": "SKLearn"})
    result = parse(doc, context())
    assert result.ok, result.refusals
    assert result.warnings == []
    model = result.manifest["spec"]["source"]["model"]
    assert model == {
        "uri": "s3://models/fraud/model.joblib",
        "format": "SKLearn",
        "runtime": {"engine": "sklearn", "isolation": "Container"},
        "serving": {"apiFormat": "V1"},
        "resources": {"cpu": "1", "memory": "2Gi", "nodesPerReplica": 1},
        "scaling": {"minReplicas": 1, "maxReplicas": 1, "metric": None},
        "queue": {"name": None},
        "cache": {"enabled": False},
    }


def test_yaml_source_fills_no_model_defaults():
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "x"}}},
    }
    doc = m({"spec.source": {"type": "YAML", "inferenceService": isvc}})
    result = parse(doc, context())
    assert result.ok, result.refusals
    assert result.manifest["spec"]["source"] == {"type": "YAML", "inferenceService": isvc}
    assert result.manifest["spec"]["source"]["inferenceService"] is not isvc


DEFAULT_CASES = [
    ({}, "spec.namespace", "ml-serving"),
    ({"spec.namespace": "team-a"}, "spec.namespace", "team-a"),
    ({}, "spec.syncType", "Auto"),
    ({}, "spec.access", {"exposure": "Internal"}),
    ({"spec.access": {"exposure": None}}, "spec.access", {"exposure": "Internal"}),
    ({"format": None}, "format", "vLLM"),
    ({"uri": "s3://bkt/m", "format": "XGBoost"}, "runtime.engine", "xgboost"),
    ({"uri": "s3://bkt/m", "format": "SKLearn"}, "runtime.engine", "sklearn"),
    ({"uri": "s3://bkt/m", "format": "LightGBM"}, "runtime.engine", "lightgbm"),
    ({"uri": "s3://bkt/m", "format": "TensorFlow"}, "runtime.engine", "tensorflow"),
    ({"uri": "s3://bkt/m", "format": "PyTorch"}, "runtime.engine", "torchserve"),
    ({"uri": "s3://bkt/m", "format": "ONNX"}, "runtime.engine", "triton"),
    ({"uri": "s3://bkt/m", "format": "TensorRT"}, "runtime.engine", "triton"),
    ({"uri": "s3://bkt/m", "format": "Triton"}, "runtime.engine", "triton"),
    ({"uri": "s3://bkt/m", "format": "MLflow"}, "runtime.engine", "mlserver"),
    ({"uri": "s3://bkt/m", "format": "PMML"}, "runtime.engine", "kserve-pmmlserver"),
    ({"uri": "s3://bkt/m", "format": "Paddle"}, "runtime.engine", "kserve-paddleserver"),
    ({"uri": "hf://nvidia/parakeet-tdt-0.6b-v3"}, "runtime.engine", "parakeet"),
    ({"uri": f"hf://nvidia/parakeet-tdt-0.6b-v3:{COMMIT}"}, "runtime.engine", "parakeet"),
    ({"uri": "s3://bkt/m", "format": "vLLM"}, "runtime.engine", "vllm"),
    ({"runtime.engine": "my-runtime"}, "runtime.engine", "my-runtime"),
    ({}, "runtime.isolation", "Container"),
    ({"serving.apiFormat": "V2"}, "serving.apiFormat", "V2"),
    # apiFormat: the first protocol the runtime speaks (reference/kserve/runtimes/).
    ({"uri": "s3://bkt/m", "format": "ONNX"}, "serving.apiFormat", "V2"),
    ({"uri": "s3://bkt/m", "format": "TensorRT"}, "serving.apiFormat", "V2"),
    ({"uri": "s3://bkt/m", "format": "Triton"}, "serving.apiFormat", "V2"),
    ({"uri": "s3://bkt/m", "format": "MLflow"}, "serving.apiFormat", "V2"),
    (
        {"uri": "s3://bkt/m", "format": "SKLearn", "runtime.engine": "mlserver"},
        "serving.apiFormat",
        "V2",
    ),
    (
        {"uri": "s3://bkt/m", "format": "TensorFlow", "runtime.engine": "triton"},
        "serving.apiFormat",
        "V2",
    ),
    ({"uri": "s3://bkt/m", "format": "TensorFlow"}, "serving.apiFormat", "V1"),
    ({"uri": "s3://bkt/m", "format": "PyTorch"}, "serving.apiFormat", "V1"),
    ({"uri": "s3://bkt/m", "format": "SKLearn"}, "serving.apiFormat", "V1"),
    ({"uri": "s3://bkt/m", "format": "PMML"}, "serving.apiFormat", "V1"),
    (
        {"uri": "s3://bkt/m", "format": "SKLearn", "runtime.engine": "my-sklearn"},
        "serving.apiFormat",
        "V1",
    ),
    ({"uri": PARAKEET}, "serving.apiFormat", "OpenAI"),
    ({"runtime.engine": "my-runtime"}, "serving.apiFormat", "OpenAI"),
    ({"resources.memory": "16Gi"}, "serving.kvCacheSize", "4Gi"),
    ({"resources.memory": "6Gi"}, "serving.kvCacheSize", "1536Mi"),
    ({"resources.memory": "5G"}, "serving.kvCacheSize", "1250000000"),
    ({"resources.cpu": "4"}, "serving.maxConcurrentRequests", 8),
    ({"resources.cpu": "1500m"}, "serving.maxConcurrentRequests", 3),
    ({"resources.cpu": "250m"}, "serving.maxConcurrentRequests", 1),
    ({"resources.cpu": 2000}, "serving.maxConcurrentRequests", 1024),
    ({**GPU}, "resources.cpu", "3"),
    ({**GPU}, "resources.memory", "8Gi"),
    ({**GPU}, "serving.kvCacheSize", None),
    ({**GPU}, "serving.maxConcurrentRequests", None),
    ({**MULTINODE}, "engine.pipelineParallelSize", 2),
    ({**MULTINODE, "scaling.minReplicas": 2}, "scaling.maxReplicas", 2),
    ({**MULTINODE, "scaling.minReplicas": 2}, "scaling.metric", None),
    ({"uri": "s3://bkt/m", "format": "SKLearn", **GPU}, "resources.cpu", "1"),
    ({"uri": "s3://bkt/m", "format": "SKLearn", **GPU}, "resources.memory", "2Gi"),
    ({}, "resources.nodesPerReplica", 1),
    ({"scaling.minReplicas": 3}, "scaling.maxReplicas", 3),
    ({"scaling.maxReplicas": 4}, "scaling.metric", {"requestsWaiting": 2}),
    ({"scaling.maxReplicas": 4, **GPU}, "scaling.metric", {"requestsWaiting": 2}),
    (
        {"spec.profileName": "bare", "scaling.maxReplicas": 4},
        "scaling.metric",
        {"cpu": 80},
    ),
    ({"spec.profileName": "bare", "scaling.maxReplicas": 4, **GPU}, "scaling.metric", None),
    (
        {"uri": "s3://bkt/m", "format": "SKLearn", "scaling.maxReplicas": 4},
        "scaling.metric",
        {"cpu": 80},
    ),
    ({"scaling.minReplicas": 2, "scaling.maxReplicas": 2}, "scaling.metric", None),
    ({"scaling.metric": {"cpu": 50}, "scaling.maxReplicas": 3}, "scaling.metric", {"cpu": 50}),
    ({}, "queue", {"name": None}),
    ({"cache.enabled": True, "cache.size": "2Gi"}, "cache.nodeGroup", "gpu-l4"),
    ({"cache": {"enabled": False}}, "cache", {"enabled": False}),
    ({**GPU}, "resources.accelerator.gpu.vendor", "nvidia"),
    ({**GPU}, "resources.accelerator.gpu.model", None),
    ({**GPU}, "resources.accelerator.gpu.capacityType", "Any"),
    (
        {"resources.accelerator": None},
        "resources",
        {"cpu": "1", "memory": "4Gi", "nodesPerReplica": 1},
    ),
]


def _case_id(case):
    changes, path, expected = case
    given = ",".join(f"{k.rsplit('.', 1)[-1]}={v!r}" for k, v in changes.items())[:40]
    return f"{path}={expected!r}[{given}]"


@pytest.mark.parametrize(
    ("changes", "path", "expected"), DEFAULT_CASES, ids=[_case_id(c) for c in DEFAULT_CASES]
)
def test_default(changes, path, expected):
    result = parse(m(changes), context())
    assert result.ok, result.refusals
    full = path if path.startswith("spec.") else f"spec.source.model.{path}"
    assert get_path(result.manifest, full) == expected


@pytest.mark.parametrize(
    ("master", "key", "expected"),
    [
        ({"dtype": "bfloat16"}, "dtype", "bfloat16"),
        ({"quantization": "awq"}, "quantization", "awq"),
        ({"reasoningParser": "qwen3"}, "reasoningParser", "qwen3"),
        ({"toolCallParser": "hermes"}, "toolCallParser", "hermes"),
        ({"gpuMemoryUtilization": 0.8}, "gpuMemoryUtilization", 0.8),
        ({"extraArgs": ["--enforce-eager"]}, "extraArgs", ["--enforce-eager"]),
        ({}, "dtype", "auto"),
    ],
    ids=[
        "dtype",
        "quantization",
        "reasoningParser",
        "toolCallParser",
        "gpuMemUtil",
        "extraArgs",
        "builtin",
    ],
)
def test_model_master_replaces_builtin_engine_defaults(master, key, expected):
    ctx = context(engine_defaults=master)
    result = parse(SHORTEST, ctx)
    assert result.ok, result.refusals
    assert result.manifest["spec"]["source"]["model"]["engine"][key] == expected
    # ...and a value in the manifest still wins.
    doc = m({f"engine.{key}": "float16" if key == "dtype" else None})
    if key == "dtype":
        assert parse(doc, ctx).manifest["spec"]["source"]["model"]["engine"]["dtype"] == "float16"


def test_invalid_model_master_default_is_reported_as_such():
    result = parse(SHORTEST, context(engine_defaults={"dtype": "fp4"}))
    assert [p.path for p in result.refusals] == ["spec.source.model.engine.dtype"]
    assert "model master" in result.refusals[0].message


def test_null_everywhere_means_default():
    nulls = m(
        {
            "spec.namespace": None,
            "spec.syncType": None,
            "spec.access": None,
            "format": None,
            "runtime": None,
            "engine": None,
            "serving": None,
            "resources": None,
            "scaling": None,
            "queue": None,
            "cache": None,
        }
    )
    assert parse(nulls, context()).manifest == CPU_FILLED


def test_unknown_profile_leaves_namespace_unset_without_crashing():
    result = parse(m({"spec.profileName": "nope"}), ManifestContext(profiles={}))
    assert result.manifest["spec"]["namespace"] is None
    assert [p.path for p in result.refusals] == ["spec.profileName"]
    assert "none yet" in result.refusals[0].message


def test_profile_namespace_is_the_default():
    ctx = context(profiles={"prod-inference": profile(namespace="other")})
    assert parse(SHORTEST, ctx).manifest["spec"]["namespace"] == "other"


# parakeet chosen from the uri, pinned on a parakeet uri, and pinned on another repository.
PARAKEET_WAYS = [
    {"uri": PARAKEET},
    {"uri": f"{PARAKEET}:{COMMIT}", "runtime.engine": "parakeet"},
    {"uri": f"hf://acme/asr-finetune:{COMMIT}", "runtime.engine": "parakeet"},
]
PARAKEET_IDS = ["default", "explicit", "explicit-other-repo"]


@pytest.mark.parametrize("way", PARAKEET_WAYS, ids=PARAKEET_IDS)
def test_parakeet_gets_no_vllm_defaults(way):
    result = parse(m({**way, "scaling.maxReplicas": 3}), context())
    assert result.ok, result.refusals
    model = result.manifest["spec"]["source"]["model"]
    assert model["runtime"] == {"engine": "parakeet", "isolation": "Container"}
    assert "engine" not in model
    assert model["serving"] == {"apiFormat": "OpenAI"}
    # A range on CPU follows cpu, never requestsWaiting (vLLM's metric), KEDA or not.
    assert model["scaling"]["metric"] == {"cpu": 80}


@pytest.mark.parametrize("way", PARAKEET_WAYS, ids=PARAKEET_IDS)
def test_parakeet_range_on_gpu_has_no_autoscaler_and_says_so(way):
    result = parse(m({**way, **GPU, "scaling.maxReplicas": 3}), context())
    assert result.ok, result.refusals
    model = result.manifest["spec"]["source"]["model"]
    assert "engine" not in model
    assert model["serving"] == {"apiFormat": "OpenAI"}
    assert model["scaling"]["metric"] is None
    warnings = [p for p in result.warnings if p.path == "spec.source.model.scaling.metric"]
    assert len(warnings) == 1
    assert "no autoscaler on GPU for the parakeet runtime" in warnings[0].message


def test_a_runtime_of_ones_own_shows_only_what_it_is_passed():
    result = parse(m({"runtime.engine": "my-vllm"}), context(engine_defaults={"dtype": "bfloat16"}))
    assert result.ok, result.refusals
    model = result.manifest["spec"]["source"]["model"]
    assert model["engine"] == {"extraArgs": []}
    assert model["serving"] == {"apiFormat": "OpenAI"}
    given = m({"runtime.engine": "my-vllm", "engine.dtype": "float16", "engine.extraArgs": ["-x"]})
    model = parse(given, context()).manifest["spec"]["source"]["model"]
    assert model["engine"] == {"dtype": "float16", "extraArgs": ["-x"]}


@pytest.mark.parametrize(
    ("changes", "scaling"),
    [
        ({**MULTINODE}, "fixed at 1 replica"),
        ({**MULTINODE, "scaling.minReplicas": 3}, "fixed at 3 replicas"),
        ({**GPU, "scaling.maxReplicas": 3}, "autoscales 1–3 replicas on requestsWaiting 2"),
    ],
    ids=["multinode", "multinode-3", "single-node-range"],
)
def test_multinode_is_described_as_fixed(changes, scaling):
    result = parse(m(changes), context())
    assert result.ok, result.refusals
    assert scaling_of(result.manifest) == scaling
    # Even a refused range (shown by the dry run beside the refusal) is described as fixed.
    manifest = copy.deepcopy(result.manifest)
    manifest["spec"]["source"]["model"]["scaling"]["maxReplicas"] = 9
    if changes.get("resources.nodesPerReplica"):
        assert scaling_of(manifest).endswith("(multi-node replicas do not autoscale)")


@pytest.mark.parametrize(
    "changes",
    [
        *PARAKEET_WAYS,
        {"uri": PARAKEET, **GPU, "scaling.maxReplicas": 3},
        {"runtime.engine": "my-vllm", "engine.dtype": "float16", "serving.kvCacheSize": "1Gi"},
        {"uri": "s3://bkt/wine", "format": "MLflow"},
        {"uri": "s3://bkt/m.onnx", "format": "ONNX", "scaling.maxReplicas": 3},
        {**MULTINODE, "scaling.minReplicas": 2},
    ],
    ids=[*PARAKEET_IDS, "parakeet-gpu-range", "own-runtime", "mlflow", "onnx-range", "multinode"],
)
def test_get_parses_back_to_itself(changes):
    """parse(get) is a no-op: the same manifest, and the same warnings (no new ones)."""
    first = parse(m(changes), context())
    assert first.ok, first.refusals
    again = parse(copy.deepcopy(first.manifest), context())
    assert again.ok, again.refusals
    assert again.manifest == first.manifest
    assert [str(p) for p in again.warnings] == [str(p) for p in first.warnings]
