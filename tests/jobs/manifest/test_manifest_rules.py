"""Every refusal and warning: its path, its level and a key phrase of its message."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.manifest import ManifestContext, parse

# tests/ may or may not be a package (both layouts are in use); the support module is
# found either way.
try:
    from .manifest_support import (
        CATALOG,
        COMMIT,
        DELETE,
        GPU,
        MULTINODE,
        PARAKEET,
        context,
        m,
        model_facts,
        profile,
    )
except ImportError:
    from manifest_support import (
        CATALOG,
        COMMIT,
        DELETE,
        GPU,
        MULTINODE,
        PARAKEET,
        context,
        m,
        model_facts,
        profile,
    )

P = "spec.source.model"
PINNED = f"hf://BAAI/bge-m3:{COMMIT}"
SK = {"uri": "s3://bkt/fraud/model.joblib", "format": "SKLearn"}
ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}}}},
}


def gpu(count=1, **more):
    return {"resources.accelerator": {"gpu": {"countPerReplica": count, **more}}}


NO_DOMAINS = {"verified_domains": frozenset(), "access_policies": frozenset()}
NVIDIA_ONLY = {
    "profiles": {"prod-inference": profile(machine_catalog=CATALOG[:3])},
}
VISION = {"model": model_facts(generative=True, modalities=frozenset({"image"}))}
LIMIT_4K = {"model": model_facts(generative=True, max_context_tokens=4096)}
TWO_CACHES = {
    "profiles": {
        "prod-inference": profile(cache_node_groups={"gpu-l4": 100 * 2**30, "gpu-h100": 2**40})
    }
}
NO_CACHES = {"profiles": {"prod-inference": profile(cache_node_groups={})}}
# A local machine without GPUs, 8 GiB of memory (jobs.machine_catalog.machine_catalog's shape).
THIS_MACHINE = {
    "profiles": {
        "prod-inference": profile(
            machine_catalog=(
                {"name": "cpu", "gpusPerNode": 0, "nodes": 1, "nodeCpu": "4", "nodeMemory": "8Gi"},
            )
        )
    }
}
DOMAIN = {"exposure": "Domain", "domain": "models.example.com", "accessPolicy": "default"}

# (id, changes (relative to spec.source.model unless they start with spec), context kwargs,
#  path (relative likewise), level, phrase)
CASES = [
    # --- document and spec --------------------------------------------------------------
    (
        "apiVersion-wrong",
        {"apiVersion": "servedeck.io/v2"},
        {},
        "apiVersion",
        "r",
        "is not servedeck.io/v1",
    ),
    ("apiVersion-missing", {"apiVersion": DELETE}, {}, "apiVersion", "r", "required"),
    ("kind-wrong", {"kind": "Deployment"}, {}, "kind", "r", "is not Application"),
    ("spec-missing", {"spec": DELETE}, {}, "spec", "r", "required"),
    ("spec-list", {"spec": [1]}, {}, "spec", "r", "not a mapping"),
    ("top-unknown", {"metadata": {"name": "x"}}, {}, "metadata", "r", "unknown field"),
    ("name-missing", {"spec.name": DELETE}, {}, "spec.name", "r", "required, missing"),
    ("name-null", {"spec.name": None}, {}, "spec.name", "r", "required, missing"),
    ("name-not-dns", {"spec.name": "Bge_Embed"}, {}, "spec.name", "r", "For example bge-embed"),
    ("name-too-long", {"spec.name": "a" * 64}, {}, "spec.name", "r", "more than 63"),
    ("name-number", {"spec.name": 12}, {}, "spec.name", "r", "not text"),
    ("name-digit-kserve", {"spec.name": "7b-chat"}, {}, "spec.name", "r", "start with a letter"),
    ("name-long-kserve", {"spec.name": "a" * 54}, {}, "spec.name", "r", "at most 53"),
    (
        "profile-unknown",
        {"spec.profileName": "prod-inferenc"},
        {},
        "spec.profileName",
        "r",
        "Did you mean prod-inference?",
    ),
    ("profile-none-exist", {}, {"profiles": {}}, "spec.profileName", "r", "none yet"),
    ("namespace-invalid", {"spec.namespace": "ML"}, {}, "spec.namespace", "r", "DNS-1123"),
    ("syncType-case", {"spec.syncType": "auto"}, {}, "spec.syncType", "r", "Write it as Auto"),
    (
        "syncType-bogus",
        {"spec.syncType": "Sometimes"},
        {},
        "spec.syncType",
        "r",
        "accepts Auto or Manual",
    ),
    # --- access -------------------------------------------------------------------------
    (
        "exposure-bogus",
        {"spec.access": {"exposure": "Public"}},
        {},
        "spec.access.exposure",
        "r",
        "accepts Internal or Domain",
    ),
    (
        "domain-missing",
        {"spec.access": {"exposure": "Domain", "accessPolicy": "default"}},
        {},
        "spec.access.domain",
        "r",
        "required with exposure Domain",
    ),
    (
        "domain-unverified",
        {"spec.access": {"exposure": "Domain", "domain": "evil.com", "accessPolicy": "default"}},
        {},
        "spec.access.domain",
        "r",
        "not a verified domain",
    ),
    (
        "domain-none-yet",
        {"spec.access": {"exposure": "Domain"}},
        NO_DOMAINS,
        "spec.access.domain",
        "r",
        "exposure: Internal meanwhile",
    ),
    (
        "domain-url",
        {
            "spec.access": {
                "exposure": "Domain",
                "domain": "https://models.example.com",
                "accessPolicy": "default",
            }
        },
        {},
        "spec.access.domain",
        "r",
        "Give the domain only",
    ),
    (
        "policy-missing",
        {"spec.access": {"exposure": "Domain", "domain": "models.example.com"}},
        {},
        "spec.access.accessPolicy",
        "r",
        "required with exposure Domain",
    ),
    (
        "policy-unknown",
        {
            "spec.access": {
                "exposure": "Domain",
                "domain": "models.example.com",
                "accessPolicy": "defualt",
            }
        },
        {},
        "spec.access.accessPolicy",
        "r",
        "Did you mean default?",
    ),
    (
        "policy-none-yet",
        {"spec.access": {"exposure": "Domain"}},
        NO_DOMAINS,
        "spec.access.accessPolicy",
        "r",
        "no access policy yet",
    ),
    (
        "domain-no-gateway-api",
        {"spec.profileName": "bare", "spec.access": DOMAIN},
        {},
        "spec.access.exposure",
        "r",
        "'Domain' needs the Gateway API add-on (gatewayApi) on the cluster of profile bare, "
        "which it does not have; accepts Internal there. Ask an admin to install the Gateway "
        "API add-on",
    ),
    (
        "internal-with-domain",
        {"spec.access": {"domain": "models.example.com"}},
        {},
        "spec.access.domain",
        "r",
        "would be ignored",
    ),
    (
        "internal-with-policy",
        {"spec.access": {"exposure": "Internal", "accessPolicy": "default"}},
        {},
        "spec.access.accessPolicy",
        "r",
        "would be ignored",
    ),
    # --- source -------------------------------------------------------------------------
    ("type-missing", {"spec.source.type": DELETE}, {}, "spec.source.type", "r", "required"),
    (
        "type-bogus",
        {"spec.source.type": "Helm"},
        {},
        "spec.source.type",
        "r",
        "accepts Model or YAML",
    ),
    ("model-missing", {"spec.source.model": DELETE}, {}, P, "r", "required with source.type Model"),
    (
        "model-with-isvc",
        {"spec.source.inferenceService": ISVC},
        {},
        "spec.source.inferenceService",
        "r",
        "only with source.type YAML",
    ),
    (
        "yaml-without-isvc",
        {"spec.source": {"type": "YAML"}},
        {},
        "spec.source.inferenceService",
        "r",
        "required with source.type YAML",
    ),
    (
        "yaml-with-model",
        {"spec.source.type": "YAML", "spec.source.inferenceService": ISVC},
        {},
        P,
        "r",
        "only with source.type Model",
    ),
    (
        "isvc-apiVersion",
        {"spec.source": {"type": "YAML", "inferenceService": {**ISVC, "apiVersion": "v1"}}},
        {},
        "spec.source.inferenceService.apiVersion",
        "r",
        "serving.kserve.io/v1beta1",
    ),
    (
        "isvc-kind",
        {"spec.source": {"type": "YAML", "inferenceService": {**ISVC, "kind": "Pod"}}},
        {},
        "spec.source.inferenceService.kind",
        "r",
        "accepts InferenceService",
    ),
    (
        "isvc-no-spec",
        {
            "spec.source": {
                "type": "YAML",
                "inferenceService": {
                    "apiVersion": "serving.kserve.io/v1beta1",
                    "kind": "InferenceService",
                },
            }
        },
        {},
        "spec.source.inferenceService.spec",
        "r",
        "missing",
    ),
    (
        "isvc-text",
        {"spec.source": {"type": "YAML", "inferenceService": "kind: x"}},
        {},
        "spec.source.inferenceService",
        "r",
        "not a mapping",
    ),
    (
        "isvc-date",
        {
            "spec.source": {
                "type": "YAML",
                "inferenceService": {**ISVC, "metadata": {"created": dt.date(2025, 1, 1)}},
            }
        },
        {},
        "spec.source.inferenceService.metadata.created",
        "r",
        "not plain data",
    ),
    # --- uri ----------------------------------------------------------------------------
    ("uri-missing", {"uri": DELETE}, {}, "uri", "r", "required"),
    ("uri-userinfo", {"uri": "s3://AKIA:secret@bkt/m"}, {}, "uri", "r", "credentials"),
    (
        "uri-sas",
        {"uri": "https://acct1.blob.core.windows.net/c1/m?sv=1&sig=abc"},
        {},
        "uri",
        "r",
        "credentials",
    ),
    ("uri-token", {"uri": "hf://org/repo?token=hf_abc"}, {}, "uri", "r", "credentials"),
    ("uri-query", {"uri": "s3://bkt/m?foo=bar"}, {}, "uri", "r", "query string"),
    ("uri-version-on-gs", {**SK, "uri": "gs://bkt/m?versionId=3"}, {}, "uri", "r", "query string"),
    (
        "uri-generation-text",
        {**SK, "uri": "gs://bkt/m?generation=abc"},
        {},
        "uri",
        "r",
        "malformed generation",
    ),
    ("uri-scheme", {"uri": "ftp://host/m"}, {}, "uri", "r", "is not accepted"),
    ("uri-scheme-case", {"uri": "HF://BAAI/bge-m3"}, {}, "uri", "r", "lowercase"),
    ("uri-no-scheme", {"uri": "BAAI/bge-m3"}, {}, "uri", "r", "has no scheme"),
    ("uri-hf-no-org", {"uri": "hf://gpt2"}, {}, "uri", "r", "full repository id"),
    (
        "uri-https-other",
        {"uri": "https://example.com/model.bin"},
        {},
        "uri",
        "r",
        "only for Azure Blob",
    ),
    ("uri-pvc-no-path", {**SK, "uri": "pvc://models"}, {}, "uri", "r", "pvc://<claim>/<path>"),
    ("uri-oci-bad", {**SK, "uri": "oci://registry"}, {}, "uri", "r", "OCI image"),
    (
        "uri-file-on-kubernetes",
        {"uri": "file:///srv/models/SmolLM2"},
        {},
        "uri",
        "r",
        "accepts file:// on the local profile only. Copy the model onto a PersistentVolumeClaim",
    ),
    ("uri-file-dotdot", {"uri": "file:///srv/models/../etc"}, {}, "uri", "r", "'..' part"),
    ("uri-file-relative", {"uri": "file://models/x"}, {}, "uri", "r", "not an absolute path"),
    ("uri-s3-no-key", {**SK, "uri": "s3://bkt"}, {}, "uri", "r", "names no object"),
    ("uri-spaces", {"uri": " hf://BAAI/bge-m3"}, {}, "uri", "r", "spaces"),
    ("uri-fragment", {"uri": "hf://BAAI/bge-m3#main"}, {}, "uri", "r", "fragment"),
    (
        "uri-unpinned",
        {"uri": "hf://BAAI/bge-m3"},
        {},
        "uri",
        "w",
        "not pinned; a rollback may serve different bytes",
    ),
    ("uri-branch", {"uri": "hf://BAAI/bge-m3:main"}, {}, "uri", "w", "branch or tag"),
    (
        "check-model-generative",
        {**SK},
        {"model": model_facts(generative=True)},
        "format",
        "r",
        "Check model found a generative model",
    ),
    (
        "check-model-predictive",
        {},
        {"model": model_facts(generative=False)},
        "format",
        "r",
        "Check model found a predictive model",
    ),
    # --- format and runtime -------------------------------------------------------------
    (
        "format-required",
        {"uri": "s3://bkt/m"},
        {},
        "format",
        "r",
        "required for an artifact on s3://",
    ),
    ("format-case", {**SK, "format": "sklearn"}, {}, "format", "r", "Write it as SKLearn"),
    ("format-bogus", {**SK, "format": "Keras"}, {}, "format", "r", "accepts vLLM, SKLearn"),
    ("engine-not-dns", {"runtime.engine": "My_Runtime"}, {}, "runtime.engine", "r", "DNS-1123"),
    (
        "engine-wrong-format",
        {**SK, "runtime.engine": "vllm"},
        {},
        "runtime.engine",
        "r",
        "cannot load SKLearn models",
    ),
    (
        "isolation-bogus",
        {"runtime.isolation": "VM"},
        {},
        "runtime.isolation",
        "r",
        "Container or VirtualMachine",
    ),
    (
        "isolation-vm-no-kubevirt",
        {"spec.profileName": "bare", "runtime.isolation": "VirtualMachine"},
        {},
        "runtime.isolation",
        "r",
        "KubeVirt add-on",
    ),
    # --- engine -------------------------------------------------------------------------
    (
        "engine-predictive",
        {**SK, "engine": {"dtype": "auto"}},
        {},
        "engine",
        "r",
        "only with format vLLM",
    ),
    (
        "engine-parakeet",
        {"uri": PARAKEET, "engine": {"dtype": "auto"}},
        {},
        "engine",
        "r",
        "engine settings are vLLM's; the parakeet runtime takes none",
    ),
    (
        "engine-parakeet-explicit",
        {"runtime.engine": "parakeet", "engine.extraArgs": ["--beam-size=4"]},
        {},
        "engine",
        "r",
        "engine settings are vLLM's; the parakeet runtime takes none",
    ),
    (
        "engine-parakeet-empty",
        {"uri": PARAKEET, "engine": {}},
        {},
        "engine",
        "r",
        "Remove the engine block",
    ),
    (
        "custom-runtime-fields",
        {
            "runtime.engine": "my-vllm",
            "engine.dtype": "bfloat16",
            "engine.gpuMemoryUtilization": 0.8,
            "serving.maxContextTokens": 4096,
            "engine.extraArgs": ["--enforce-eager"],
        },
        {},
        "runtime.engine",
        "w",
        "engine.dtype, engine.gpuMemoryUtilization, serving.maxContextTokens are not passed to "
        "it and change nothing. Give the runtime what it needs in engine.extraArgs",
    ),
    (
        "custom-runtime-kv-cache",
        {"runtime.engine": "my-vllm", "serving.kvCacheSize": "8Gi"},
        {},
        "runtime.engine",
        "w",
        "passes it only engine.extraArgs, so serving.kvCacheSize is not passed",
    ),
    (
        "parakeet-serving-fields",
        {"uri": PARAKEET, "serving.maxConcurrentRequests": 8, "serving.kvCacheSize": "1Gi"},
        {},
        "runtime.engine",
        "w",
        "not vLLM: serving.kvCacheSize, serving.maxConcurrentRequests are not passed to it",
    ),
    (
        "tp-mismatch",
        {**gpu(2), "engine.tensorParallelSize": 4},
        {},
        "engine.tensorParallelSize",
        "r",
        "engine.tensorParallelSize is 4 but resources.accelerator.gpu.countPerReplica is 2",
    ),
    (
        "tp-on-cpu",
        {"engine.tensorParallelSize": 2},
        {},
        "engine.tensorParallelSize",
        "r",
        "runs on CPU",
    ),
    (
        "tp-range",
        {"engine.tensorParallelSize": 65},
        {},
        "engine.tensorParallelSize",
        "r",
        "above 64",
    ),
    (
        "pp-mismatch",
        {**gpu(1), "engine.pipelineParallelSize": 2},
        {},
        "engine.pipelineParallelSize",
        "r",
        "engine.pipelineParallelSize is 2 but resources.nodesPerReplica is 1",
    ),
    ("dtype-bogus", {"engine.dtype": "fp8"}, {}, "engine.dtype", "r", "auto, bfloat16"),
    (
        "quantization-bogus",
        {"engine.quantization": "a w q"},
        {},
        "engine.quantization",
        "r",
        "not a name",
    ),
    (
        "gpu-util-high",
        {"engine.gpuMemoryUtilization": 1.0},
        {},
        "engine.gpuMemoryUtilization",
        "r",
        "above 0.99",
    ),
    (
        "gpu-util-low",
        {"engine.gpuMemoryUtilization": 0.05},
        {},
        "engine.gpuMemoryUtilization",
        "r",
        "below 0.1",
    ),
    (
        "gpu-util-text",
        {"engine.gpuMemoryUtilization": "0.9"},
        {},
        "engine.gpuMemoryUtilization",
        "r",
        "without quotes",
    ),
    (
        "extraArgs-text",
        {"engine.extraArgs": "--enforce-eager"},
        {},
        "engine.extraArgs",
        "r",
        "not a list",
    ),
    ("extraArgs-item", {"engine.extraArgs": ["--x", 3]}, {}, "engine.extraArgs", "r", "item 1"),
    (
        "extraArgs-dtype",
        {"engine.extraArgs": ["--enforce-eager", "--dtype=half"]},
        {},
        "engine.extraArgs[1]",
        "r",
        "Remove it and set engine.dtype instead",
    ),
    (
        "extraArgs-tp",
        {"engine.extraArgs": ["-tp", "2"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "engine.tensorParallelSize",
    ),
    (
        "extraArgs-q",
        {"engine.extraArgs": ["-q", "awq"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "engine.quantization",
    ),
    (
        "extraArgs-underscore",
        {"engine.extraArgs": ["--max_model_len=4096"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "serving.maxContextTokens",
    ),
    (
        "extraArgs-served-name",
        {"engine.extraArgs": ["--served-model-name=x"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "spec.name",
    ),
    (
        "extraArgs-port",
        {"engine.extraArgs": ["--port=9000"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "the platform sets",
    ),
    (
        "extraArgs-mm",
        {"engine.extraArgs": ["--limit-mm-per-prompt", "image=2"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "serving.multimodal",
    ),
    (
        "extraArgs-kv",
        {"engine.extraArgs": ["--kv-cache-memory-bytes=1G"]},
        {},
        "engine.extraArgs[0]",
        "r",
        "serving.kvCacheSize",
    ),
    # --- serving ------------------------------------------------------------------------
    (
        "api-v1-generative",
        {"serving.apiFormat": "V1"},
        {},
        "serving.apiFormat",
        "r",
        "predictive protocol",
    ),
    (
        "api-openai-predictive",
        {**SK, "serving.apiFormat": "OpenAI"},
        {},
        "serving.apiFormat",
        "r",
        "accepts V1 or V2",
    ),
    ("api-bogus", {"serving.apiFormat": "gRPC"}, {}, "serving.apiFormat", "r", "accepted value"),
    (
        "api-v1-mlflow",
        {"uri": "s3://bkt/wine", "format": "MLflow", "serving.apiFormat": "V1"},
        {},
        "serving.apiFormat",
        "r",
        "'V1' (v1) is not a protocol of the mlserver runtime (kserve-mlserver), which speaks "
        "only v2; accepts V2 with it. Set apiFormat to V2, or leave it out (V2).",
    ),
    (
        "api-v1-pinned-mlserver",
        {**SK, "runtime.engine": "mlserver", "serving.apiFormat": "V1"},
        {},
        "serving.apiFormat",
        "r",
        "mlserver runtime (kserve-mlserver), which speaks only v2",
    ),
    (
        "api-v1-onnx",
        {"uri": "s3://bkt/m.onnx", "format": "ONNX", "serving.apiFormat": "V1"},
        {},
        "serving.apiFormat",
        "r",
        "triton runtime (kserve-tritonserver), which speaks only v2, grpc-v2; accepts V2",
    ),
    (
        "api-v1-tensorrt-gpu",
        {"uri": "s3://bkt/m.plan", "format": "TensorRT", "serving.apiFormat": "V1", **gpu()},
        {},
        "serving.apiFormat",
        "r",
        "kserve-tritonserver",
    ),
    (
        "api-v2-tensorflow",
        {"uri": "gs://bkt/saved", "format": "TensorFlow", "serving.apiFormat": "V2"},
        {},
        "serving.apiFormat",
        "r",
        "tensorflow runtime (kserve-tensorflow-serving), which speaks only v1, grpc-v1; accepts V1",
    ),
    (
        "api-openai-mlflow",
        {"uri": "s3://bkt/wine", "format": "MLflow", "serving.apiFormat": "OpenAI"},
        {},
        "serving.apiFormat",
        "r",
        "accepts V2 for a MLflow model. Set apiFormat to V2, or leave it out (V2).",
    ),
    (
        "api-v2-parakeet",
        {"uri": PARAKEET, "serving.apiFormat": "V2"},
        {},
        "serving.apiFormat",
        "r",
        "parakeet runtime (servedeck-parakeet), which speaks only v1; accepts OpenAI",
    ),
    (
        "api-v1-parakeet",
        {"uri": PARAKEET, "serving.apiFormat": "V1"},
        {},
        "serving.apiFormat",
        "r",
        "'V1' is the predictive protocol; accepts OpenAI for a generative",
    ),
    (
        "context-zero",
        {"serving.maxContextTokens": 0},
        {},
        "serving.maxContextTokens",
        "r",
        "below 1",
    ),
    (
        "context-text",
        {"serving.maxContextTokens": "8k"},
        {},
        "serving.maxContextTokens",
        "r",
        "not a whole number",
    ),
    (
        "context-over-model",
        {"serving.maxContextTokens": 8192},
        LIMIT_4K,
        "serving.maxContextTokens",
        "r",
        "above the model's own limit (4096)",
    ),
    (
        "context-predictive",
        {**SK, "serving.maxContextTokens": 10},
        {},
        "serving.maxContextTokens",
        "r",
        "only for generative",
    ),
    (
        "kv-cpu-too-big",
        {"serving.kvCacheSize": "4Gi"},
        {},
        "serving.kvCacheSize",
        "r",
        "not smaller than resources.memory (4Gi)",
    ),
    (
        "kv-gpu-too-big",
        {**gpu(1, model="l4"), "serving.kvCacheSize": "24Gi"},
        {},
        "serving.kvCacheSize",
        "r",
        "memory of one l4 GPU",
    ),
    (
        "kv-fraction",
        {"serving.kvCacheSize": "1.5"},
        {},
        "serving.kvCacheSize",
        "r",
        "not a whole number of bytes",
    ),
    ("kv-zero", {"serving.kvCacheSize": "0"}, {}, "serving.kvCacheSize", "r", "not above zero"),
    (
        "kv-predictive",
        {**SK, "serving.kvCacheSize": "1Gi"},
        {},
        "serving.kvCacheSize",
        "r",
        "only for generative",
    ),
    (
        "memory-too-small-for-kv",
        {"resources.memory": "3"},
        {},
        "resources.memory",
        "r",
        "leaves no KV cache",
    ),
    (
        "concurrency-zero",
        {"serving.maxConcurrentRequests": 0},
        {},
        "serving.maxConcurrentRequests",
        "r",
        "below 1",
    ),
    (
        "concurrency-high",
        {"serving.maxConcurrentRequests": 2000},
        {},
        "serving.maxConcurrentRequests",
        "r",
        "above 1024",
    ),
    (
        "concurrency-predictive",
        {**SK, "serving.maxConcurrentRequests": 4},
        {},
        "serving.maxConcurrentRequests",
        "r",
        "only for generative",
    ),
    ("mm-empty", {"serving.multimodal": {}}, {}, "serving.multimodal", "r", "sets no limit"),
    (
        "mm-predictive",
        {**SK, "serving.multimodal": {"maxImagesPerPrompt": 2}},
        {},
        "serving.multimodal",
        "r",
        "only for generative",
    ),
    (
        "mm-custom-runtime",
        {"runtime.engine": "my-vllm", "serving.multimodal": {"maxImagesPerPrompt": 2}},
        {},
        "serving.multimodal",
        "r",
        "did not install",
    ),
    (
        "mm-missing-modality",
        {"serving.multimodal": {"maxVideosPerPrompt": 1}},
        VISION,
        "serving.multimodal.maxVideosPerPrompt",
        "r",
        "takes no video input",
    ),
    (
        "mm-many",
        {"serving.multimodal": {"maxImagesPerPrompt": 65}},
        VISION,
        "serving.multimodal.maxImagesPerPrompt",
        "w",
        "above 64",
    ),
    (
        "mm-zero",
        {"serving.multimodal": {"maxAudioClipsPerPrompt": 0}},
        {},
        "serving.multimodal.maxAudioClipsPerPrompt",
        "r",
        "below 1",
    ),
    # --- resources ----------------------------------------------------------------------
    ("cpu-zero", {"resources.cpu": 0}, {}, "resources.cpu", "r", "not above zero"),
    ("cpu-text", {"resources.cpu": "two"}, {}, "resources.cpu", "r", "not a quantity"),
    ("cpu-bool", {"resources.cpu": True}, {}, "resources.cpu", "r", "not a quantity"),
    ("cpu-sub-milli", {"resources.cpu": "0.0001"}, {}, "resources.cpu", "r", "millicores"),
    (
        "cpu-over-node",
        {**gpu(1, model="l4"), "resources.cpu": 200},
        {},
        "resources.cpu",
        "r",
        "does not fit the node",
    ),
    (
        "memory-fraction",
        {"resources.memory": "1.5"},
        {},
        "resources.memory",
        "r",
        "not a whole number of bytes",
    ),
    (
        "memory-milli",
        {"resources.memory": "100m"},
        {},
        "resources.memory",
        "r",
        "not a whole number of bytes",
    ),
    ("memory-case", {"resources.memory": "8gi"}, {}, "resources.memory", "r", "case-sensitive"),
    (
        "memory-below-default",
        {"resources.memory": "2Gi"},
        {},
        "resources.memory",
        "w",
        "below the default for a generative model on CPU (4Gi)",
    ),
    (
        "memory-below-default-gpu",
        {**gpu(), "resources.memory": "6Gi"},
        {},
        "resources.memory",
        "w",
        "(8Gi)",
    ),
    (
        "memory-below-default-predictive",
        {**SK, "resources.memory": "1Gi"},
        {},
        "resources.memory",
        "w",
        "(2Gi)",
    ),
    (
        "memory-over-node",
        {**gpu(1, model="l4"), "resources.memory": "1Ti"},
        {},
        "resources.memory",
        "r",
        "does not fit the node",
    ),
    (
        "memory-over-the-machine",
        {"resources.memory": "9Gi"},
        THIS_MACHINE,
        "resources.memory",
        "r",
        "9Gi does not fit the machine: profile prod-inference's machine without GPUs has 8Gi",
    ),
    (
        "vendor-amd-vllm",
        gpu(1, vendor="amd"),
        {},
        "resources.accelerator.gpu.vendor",
        "r",
        "NVIDIA only",
    ),
    (
        "vendor-bogus",
        gpu(1, vendor="intel"),
        {},
        "resources.accelerator.gpu.vendor",
        "r",
        "nvidia or amd",
    ),
    (
        "vendor-absent-from-catalog",
        {**SK, **gpu(1, vendor="amd")},
        NVIDIA_ONLY,
        "resources.accelerator.gpu.vendor",
        "r",
        "has no amd GPUs",
    ),
    (
        "gpu-model-unknown",
        gpu(1, model="l5"),
        {},
        "resources.accelerator.gpu.model",
        "r",
        "Did you mean l4?",
    ),
    (
        "gpu-model-vendor",
        {**SK, **gpu(1, model="mi300x")},
        {},
        "resources.accelerator.gpu.model",
        "r",
        "is a GPU of vendor amd but vendor is nvidia; accepts a GPU model of vendor nvidia",
    ),
    (
        "gpu-count-missing",
        {"resources.accelerator": {"gpu": {"model": "l4"}}},
        {},
        "resources.accelerator.gpu.countPerReplica",
        "r",
        "required",
    ),
    ("gpu-count-zero", gpu(0), {}, "resources.accelerator.gpu.countPerReplica", "r", "below 1"),
    (
        "gpu-count-node",
        {**gpu(16, model="l4"), "engine.tensorParallelSize": 16},
        {},
        "resources.accelerator.gpu.countPerReplica",
        "r",
        "nodesPerReplica",
    ),
    (
        "gpu-count-any-node",
        gpu(16),
        {},
        "resources.accelerator.gpu.countPerReplica",
        "r",
        "the largest nvidia node of the profile holds (8 GPUs per node)",
    ),
    (
        "gpu-capacity-bogus",
        gpu(1, capacityType="Reserved"),
        {},
        "resources.accelerator.gpu.capacityType",
        "r",
        "OnDemand, Spot or Any",
    ),
    (
        "gpu-not-mapping",
        {"resources.accelerator": {"gpu": 2}},
        {},
        "resources.accelerator.gpu",
        "r",
        "not a mapping",
    ),
    (
        "nodes-on-cpu",
        {"resources.nodesPerReplica": 2, "engine.pipelineParallelSize": 2},
        {},
        "resources.nodesPerReplica",
        "r",
        "needs GPUs",
    ),
    (
        "multinode-hf",
        {**gpu(8, model="h100"), "resources.nodesPerReplica": 2},
        {},
        "uri",
        "r",
        "is on hf://, but resources.nodesPerReplica is 2: KServe serves a multi-node replica "
        "only from pvc:// or oci:// storage; accepts pvc://<claim>/<path> or "
        "oci://<registry>/<repo>[:<tag>] there. Copy the weights to a PVC (or into an OCI "
        "image) and set uri to it, or set nodesPerReplica to 1.",
    ),
    (
        "multinode-s3",
        {**MULTINODE, "uri": "s3://bkt/llama-405b"},
        {},
        "uri",
        "r",
        "Copy the weights to a PVC",
    ),
    (
        "multinode-azure",
        {**MULTINODE, "uri": "https://acct1.blob.core.windows.net/models/llama"},
        {},
        "uri",
        "r",
        "only from pvc:// or oci://",
    ),
    (
        "nodes-range",
        {**gpu(), "resources.nodesPerReplica": 65},
        {},
        "resources.nodesPerReplica",
        "r",
        "above 64",
    ),
    # --- scaling ------------------------------------------------------------------------
    (
        "min-zero-autoscaling-on-kubernetes",
        {"scaling.minReplicas": 0, "scaling.maxReplicas": 3},
        {},
        "scaling.maxReplicas",
        "r",
        "3 is above 1 with minReplicas 0 on Kubernetes profile prod-inference",
    ),
    (
        "max-below-min",
        {"scaling.minReplicas": 3, "scaling.maxReplicas": 1},
        {},
        "scaling.maxReplicas",
        "r",
        "1 is below minReplicas (3); accepts a whole number at least "
        "minReplicas. Set maxReplicas to 3 or more, or lower minReplicas.",
    ),
    ("max-zero", {"scaling.maxReplicas": 0}, {}, "scaling.maxReplicas", "r", "scale to zero"),
    (
        "replicas-huge",
        {"scaling.minReplicas": 2**40},
        {},
        "scaling.minReplicas",
        "r",
        "above 2147483647",
    ),
    (
        "replicas-float",
        {"scaling.minReplicas": 1.5},
        {},
        "scaling.minReplicas",
        "r",
        "not a whole number",
    ),
    (
        "metric-both",
        {"scaling.maxReplicas": 3, "scaling.metric": {"cpu": 80, "requestsWaiting": 2}},
        {},
        "scaling.metric",
        "r",
        "exactly one",
    ),
    (
        "metric-fixed-bounds",
        {"scaling.metric": {"cpu": 80}},
        {},
        "scaling.metric",
        "r",
        "nothing scales",
    ),
    (
        "metric-cpu-range",
        {"scaling.maxReplicas": 3, "scaling.metric": {"cpu": 150}},
        {},
        "scaling.metric.cpu",
        "r",
        "above 100",
    ),
    (
        "metric-waiting-zero",
        {"scaling.maxReplicas": 3, "scaling.metric": {"requestsWaiting": 0}},
        {},
        "scaling.metric.requestsWaiting",
        "r",
        "not above 0",
    ),
    (
        "metric-waiting-predictive",
        {**SK, "scaling.maxReplicas": 3, "scaling.metric": {"requestsWaiting": 2}},
        {},
        "scaling.metric.requestsWaiting",
        "r",
        "generative (vLLM) models",
    ),
    (
        "metric-waiting-no-keda",
        {
            "spec.profileName": "bare",
            "scaling.maxReplicas": 3,
            "scaling.metric": {"requestsWaiting": 2},
        },
        {},
        "scaling.metric.requestsWaiting",
        "r",
        "workload-autoscaling add-on (KEDA)",
    ),
    (
        "metric-unknown-key",
        {"scaling.maxReplicas": 3, "scaling.metric": {"memory": 50}},
        {},
        "scaling.metric.memory",
        "r",
        "unknown field",
    ),
    (
        "metric-not-mapping",
        {"scaling.maxReplicas": 3, "scaling.metric": "cpu"},
        {},
        "scaling.metric",
        "r",
        "not a mapping",
    ),
    (
        "multinode-range",
        {**MULTINODE, "scaling.maxReplicas": 3},
        {},
        "scaling.maxReplicas",
        "r",
        "3 is above minReplicas (1), but resources.nodesPerReplica is 2: KServe runs multi-node "
        "replicas at a fixed count only (autoscaler none), so they cannot autoscale; accepts 1",
    ),
    (
        "multinode-range-metric",
        {
            **MULTINODE,
            "scaling.minReplicas": 2,
            "scaling.maxReplicas": 4,
            "scaling.metric": {"cpu": 80},
        },
        {},
        "scaling.maxReplicas",
        "r",
        "Set maxReplicas to 2 (raise minReplicas for more replicas), or set nodesPerReplica to 1",
    ),
    (
        "parakeet-requests-waiting",
        {"uri": PARAKEET, "scaling.maxReplicas": 3, "scaling.metric": {"requestsWaiting": 2}},
        {},
        "scaling.metric.requestsWaiting",
        "r",
        "parakeet runtime, which does not export vLLM's waiting-requests metric",
    ),
    (
        "parakeet-gpu-no-autoscaler",
        {"uri": PARAKEET, **gpu(), "scaling.maxReplicas": 3},
        {},
        "scaling.metric",
        "w",
        "no autoscaler on GPU for the parakeet runtime (it exports no waiting-requests metric): "
        "it stays at minReplicas (1), never 3. Set metric (for example cpu: 80), or set "
        "maxReplicas",
    ),
    (
        "gpu-no-autoscaler",
        {"spec.profileName": "bare", **gpu(), "scaling.maxReplicas": 4},
        {},
        "scaling.metric",
        "w",
        "no autoscaler on GPU without the workload-autoscaling add-on",
    ),
    # --- queue --------------------------------------------------------------------------
    (
        "queue-no-kueue",
        {"spec.profileName": "bare", "queue.name": "gpu-queue"},
        {},
        "queue.name",
        "r",
        "(Kueue)",
    ),
    ("queue-unknown", {"queue.name": "gpu-queu"}, {}, "queue.name", "r", "Did you mean gpu-queue?"),
    ("queue-invalid", {"queue.name": "GPU Queue"}, {}, "queue.name", "r", "DNS-1123"),
    # --- cache --------------------------------------------------------------------------
    (
        "cache-pvc",
        {**SK, "uri": "pvc://models/fraud", "cache": {"enabled": True, "size": "1Gi"}},
        {},
        "cache.enabled",
        "r",
        "pvc://",
    ),
    (
        "cache-oci",
        {**SK, "uri": "oci://ghcr.io/acme/fraud:v1", "cache": {"enabled": True, "size": "1Gi"}},
        {},
        "cache.enabled",
        "r",
        "oci://",
    ),
    (
        "cache-no-addon",
        {"spec.profileName": "bare", "cache": {"enabled": True, "size": "1Gi"}},
        {},
        "cache.enabled",
        "r",
        "weight cache of the model-serving add-on",
    ),
    (
        "cache-size-missing",
        {"cache": {"enabled": True}},
        {},
        "cache.size",
        "r",
        "required when the cache is enabled",
    ),
    (
        "cache-size-too-big",
        {"cache": {"enabled": True, "size": "600Gi"}},
        {},
        "cache.size",
        "r",
        "larger than node group gpu-l4's cache (500Gi)",
    ),
    (
        "cache-several-groups",
        {"cache": {"enabled": True, "size": "1Gi"}},
        TWO_CACHES,
        "cache.nodeGroup",
        "r",
        "several node groups",
    ),
    (
        "cache-group-unknown",
        {"cache": {"enabled": True, "size": "1Gi", "nodeGroup": "gpu-l5"}},
        {},
        "cache.nodeGroup",
        "r",
        "Did you mean gpu-l4?",
    ),
    (
        "cache-no-groups",
        {"cache": {"enabled": True, "size": "1Gi"}},
        NO_CACHES,
        "cache.nodeGroup",
        "r",
        "no node group with a weight cache",
    ),
    (
        "cache-disabled-size",
        {"cache": {"enabled": False, "size": "1Gi"}},
        {},
        "cache.size",
        "r",
        "would be ignored",
    ),
    (
        "cache-enabled-text",
        {"cache": {"enabled": "yes"}},
        {},
        "cache.enabled",
        "r",
        "without quotes",
    ),
]


def _full(path: str) -> str:
    return path if path.startswith(("spec", "apiVersion", "kind", "metadata")) else f"{P}.{path}"


@pytest.mark.parametrize(
    ("changes", "ctx_kw", "path", "level", "phrase"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_problem(changes, ctx_kw, path, level, phrase):
    changes = {"uri": PINNED, **changes}
    result = parse(m(changes), context(**ctx_kw))
    found = result.refusals if level == "r" else result.warnings
    matching = [p for p in found if p.path == _full(path)]
    assert matching, f"no {level} at {_full(path)}; got {[str(p) for p in result.problems()]}"
    assert any(phrase in p.message for p in matching), [p.message for p in matching]
    assert all(p.level == ("refusal" if level == "r" else "warning") for p in found)
    # Every refusal says what is accepted; a message never stops at "invalid".
    for problem in result.refusals:
        assert "accepts" in problem.message or "Remove" in problem.message, problem


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c[4] == "r" and c[0] not in {"spec-missing", "spec-list"}],
    ids=lambda c: c[0],
)
def test_one_mistake_gives_one_refusal(case):
    """No cascades: one wrong value is reported once, not again by every rule after it."""
    _, changes, ctx_kw, path, _, _ = case
    result = parse(m({"uri": PINNED, **changes}), context(**ctx_kw))
    assert len(result.refusals) <= 2, [str(p) for p in result.refusals]


@pytest.mark.parametrize(
    "uri",
    [
        f"hf://meta-llama/Llama-3.1-8B-Instruct:{COMMIT}",
        "s3://bkt/models/fraud?versionId=3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        "gs://bkt/models/fraud?generation=1360887697105000",
        "pvc://models-claim/fraud/v3",
        "oci://ghcr.io/acme/fraud:v1",
        "oci://registry.local:5000/acme/fraud@sha256:" + "a" * 64,
        "https://acct1.blob.core.windows.net/models/fraud/model.joblib",
    ],
)
def test_accepted_uris(uri):
    result = parse(
        m({"uri": uri, "format": "vLLM" if uri.startswith("hf") else "SKLearn"}), context()
    )
    assert result.ok, result.refusals
    assert result.warnings == []


def test_credentials_are_never_repeated_in_the_message():
    result = parse(m({"uri": "s3://AKIAXX:topsecret@bkt/m?X-Amz-Signature=deadbeef"}), context())
    text = " ".join(str(p) for p in result.problems())
    assert "topsecret" not in text and "deadbeef" not in text
    assert "credentials" in text


def test_text_only_model_is_not_checked_for_modalities():
    ctx = context(model=model_facts(generative=True, modalities=frozenset()))
    result = parse(m({"uri": PINNED, "serving.multimodal": {"maxVideosPerPrompt": 1}}), ctx)
    assert result.ok, result.refusals


def test_memory_at_the_default_gives_no_warning():
    result = parse(m({"uri": PINNED, "resources.memory": "4Gi"}), context())
    assert result.ok and result.warnings == []


def test_requests_waiting_with_keda_is_accepted():
    doc = m({"uri": PINNED, "scaling.maxReplicas": 3, "scaling.metric": {"requestsWaiting": 1.5}})
    result = parse(doc, context())
    assert result.ok, result.refusals


def test_vm_isolation_with_kubevirt_is_accepted():
    result = parse(m({"uri": PINNED, "runtime.isolation": "VirtualMachine"}), context())
    assert result.ok, result.refusals


def test_amd_with_a_runtime_of_ones_own_is_accepted():
    doc = m({"uri": PINNED, "runtime.engine": "rocm-vllm", **gpu(1, vendor="amd")})
    result = parse(doc, context())
    assert result.ok, result.refusals
    assert (
        result.manifest["spec"]["source"]["model"]["resources"]["accelerator"]["gpu"]["vendor"]
        == "amd"
    )


def test_local_backend_accepts_names_kserve_would_refuse():
    ctx = ManifestContext(profiles={"prod-inference": profile(backend="local")})
    assert parse(m({"uri": PINNED, "spec.name": "7b-chat"}), ctx).ok


@pytest.mark.parametrize(
    "name",
    ["7b-chat", "7" + "b" * 62, "7" + "b" * 50 + "-" + "c" * 11],
    ids=["short", "63-characters", "dash-at-the-cut"],
)
def test_the_suggested_kserve_rename_is_a_name_kserve_accepts(name):
    refusals = parse(m({"uri": PINNED, "spec.name": name}), context()).refusals
    digit = next(p.message for p in refusals if "starts with a digit" in p.message)
    suggested = digit.rsplit("for example ", 1)[1].rstrip(".")
    assert suggested.startswith("m-7")
    assert parse(m({"uri": PINNED, "spec.name": suggested}), context()).ok


def test_matching_parallel_sizes_are_accepted():
    doc = m(
        {
            "uri": "pvc://models-pvc/llama-3.1-405b",
            "format": "vLLM",
            **gpu(4, model="h100"),
            "resources.nodesPerReplica": 2,
            "engine.tensorParallelSize": 4,
            "engine.pipelineParallelSize": 2,
        }
    )
    result = parse(doc, context())
    assert result.ok, result.refusals


def test_gpu_default_is_unused_on_a_cluster_with_keda():
    doc = m({"uri": PINNED, **GPU, "scaling.maxReplicas": 4})
    result = parse(doc, context())
    assert result.warnings == []


def test_runtime_protocols_are_the_reference_runtimes_own():
    """ENGINE_PROTOCOLS is a copy of facts: each protocol list is the protocolVersions of the
    ClusterServingRuntime the renderer picks for that engine (reference/kserve/runtimes/), and
    parakeet's that of the ServingRuntime ServeDeck renders."""
    from jobs.manifest import ENGINE_PROTOCOLS
    from jobs.render.admission import cluster_runtimes
    from jobs.render.runtimes import (
        ENGINE_RUNTIMES,
        HUGGINGFACE_RUNTIME,
        PARAKEET_RUNTIME,
        parakeet_serving_runtime,
    )
    from jobs.render.schemas import crd_dir

    reference = cluster_runtimes(crd_dir().parent / "runtimes")
    assert reference, "no reference runtimes found"
    picked = {**ENGINE_RUNTIMES, "vllm": HUGGINGFACE_RUNTIME}
    for engine, (runtime, protocols) in ENGINE_PROTOCOLS.items():
        if engine == "parakeet":
            assert runtime == PARAKEET_RUNTIME
            spec = parakeet_serving_runtime("a", "ns", {}, "image")["spec"]
        else:
            assert runtime == picked[engine], engine
            spec = reference[runtime]
        assert tuple(protocols) == tuple(spec["protocolVersions"]), engine


def test_a_runtime_of_ones_own_takes_any_flag_in_extra_args():
    # The fields are not passed to it, so extraArgs is where its settings go: no flag clashes.
    args = ["--dtype=bfloat16", "--max-model-len=4096", "--port=9000", "-tp", "2"]
    result = parse(
        m({"uri": PINNED, "runtime.engine": "my-vllm", "engine.extraArgs": args}), context()
    )
    assert result.ok, result.refusals
    assert result.warnings == []


def test_domain_on_the_local_backend_needs_no_gateway_api():
    # No cluster there: the console's own gateway serves the domain.
    ctx = context(profiles={"prod-inference": profile(backend="local", addons=frozenset())})
    result = parse(m({"uri": PINNED, "spec.access": DOMAIN}), ctx)
    assert result.ok, result.refusals


def test_domain_with_gateway_api_is_accepted():
    result = parse(m({"uri": PINNED, "spec.access": DOMAIN}), context())
    assert result.ok, result.refusals


@pytest.mark.parametrize(
    "changes",
    [
        MULTINODE,
        {
            **MULTINODE,
            "uri": "oci://registry.example.com/models/llama:3.1",
            "scaling.minReplicas": 3,
        },
        {**MULTINODE, "scaling.minReplicas": 2, "scaling.maxReplicas": 2},
    ],
    ids=["pvc", "oci-fixed-3", "equal-bounds"],
)
def test_multinode_from_pvc_or_oci_at_a_fixed_count_is_accepted(changes):
    result = parse(m(changes), context())
    assert result.ok, result.refusals
    assert result.warnings == []


@pytest.mark.parametrize(
    ("changes", "api"),
    [
        ({"uri": "s3://bkt/wine", "format": "MLflow", "serving.apiFormat": "V2"}, "V2"),
        ({**SK, "serving.apiFormat": "V2"}, "V2"),
        ({"uri": "gs://bkt/saved", "format": "TensorFlow", "serving.apiFormat": "V1"}, "V1"),
        ({"uri": "s3://bkt/m", "format": "PyTorch", "serving.apiFormat": "V2"}, "V2"),
        ({**SK, "runtime.engine": "my-sklearn", "serving.apiFormat": "V1"}, "V1"),
        ({"uri": PARAKEET}, "OpenAI"),
        ({"serving.apiFormat": "V2"}, "V2"),
    ],
    ids=[
        "mlflow-v2",
        "sklearn-v2",
        "tensorflow-v1",
        "torchserve-v2",
        "own-runtime",
        "parakeet",
        "vllm-v2",
    ],
)
def test_api_formats_the_runtime_speaks_are_accepted(changes, api):
    result = parse(m({"uri": PINNED, **changes}), context())
    assert result.ok, result.refusals
    assert result.manifest["spec"]["source"]["model"]["serving"]["apiFormat"] == api


def test_a_refused_manifest_lists_every_problem_at_once():
    """Bug 8: the weight cache without cache.size on a profile without the cache add-on named
    only the add-on (an early return); fixing one problem must not reveal the next."""
    given = m(
        {
            "spec.profileName": "bare",
            "cache": {"enabled": True},
            "queue.name": "gpu-queue",
            "scaling.maxReplicas": 0,
        }
    )
    paths = {p.path for p in parse(given, context()).refusals}
    assert {f"{P}.cache.enabled", f"{P}.cache.size", f"{P}.queue.name"} <= paths
    assert f"{P}.scaling.maxReplicas" in paths
