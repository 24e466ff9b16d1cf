"""Golden checks of the rendered fields that matter: engine arguments, resources, node
affinity, labels and annotations, the autoscaler, multi-node, parakeet, the weight cache,
the route, the token reference, and the errors render() raises.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from jobs.render import (
    PARAKEET_IMAGE,
    RenderError,
    RenderTarget,
    render,
    to_json,
    to_yaml,
    validate,
)

try:
    from .test_render import (
        CATALOG,
        COMMIT,
        DOMAIN,
        FULL,
        GIB,
        PARAKEET,
        TARGETS,
        YAML_ISVC,
        build,
        filled,
        gpu,
        kind_of,
        predictive,
        predictor,
    )
except ImportError:
    from test_render import (
        CATALOG,
        COMMIT,
        DOMAIN,
        FULL,
        GIB,
        PARAKEET,
        TARGETS,
        YAML_ISVC,
        build,
        filled,
        gpu,
        kind_of,
        predictive,
        predictor,
    )


def test_full_gpu_manifest_golden_fields():
    objects = build(FULL, revision=3)
    assert [o["kind"] for o in objects] == ["LocalModelCache", "InferenceService"]
    isvc = objects[1]
    assert isvc["metadata"]["labels"] == {
        "servedeck.io/application": "app",
        "app.kubernetes.io/managed-by": "servedeck",
        "kueue.x-k8s.io/queue-name": "gpu-queue",
    }
    assert isvc["metadata"]["annotations"] == {
        "serving.kserve.io/deploymentMode": "Standard",
        "serving.kserve.io/autoscalerClass": "keda",
        "serving.kserve.io/nodegroup": "gpu-l4",
        "serving.kserve.io/storageSecretName": "hf-token",
        "servedeck.io/revision": "3",
    }
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "huggingface"}
    assert model["runtime"] == "kserve-huggingfaceserver"
    assert model["storageUri"] == f"hf://Qwen/Qwen3-8B:{COMMIT}"
    assert "protocolVersion" not in model
    assert model["args"] == [
        "--backend=vllm",
        "--max-model-len=32768",
        "--tensor-parallel-size=2",
        "--pipeline-parallel-size=1",
        "--dtype=bfloat16",
        "--quantization=fp8",
        "--reasoning-parser=deepseek_r1",
        "--tool-call-parser=hermes",
        "--enable-auto-tool-choice",
        "--gpu-memory-utilization=0.85",
        "--max-num-seqs=64",
        '--limit-mm-per-prompt={"image":4,"video":1}',
        f"--kv-cache-memory-bytes={12 * GIB}",
        "--enable-prefix-caching",
        "--max-num-batched-tokens=8192",
    ]
    assert model["env"] == [
        {"name": "VLLM_MEDIA_URL_ALLOW_REDIRECTS", "value": "0"},
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
        },
    ]
    amounts = {"cpu": "6", "memory": "64Gi", "nvidia.com/gpu": "2"}
    assert model["resources"] == {"requests": amounts, "limits": amounts}
    pred = isvc["spec"]["predictor"]
    assert pred["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]},
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ]
            }
        ]
    }
    assert (pred["minReplicas"], pred["maxReplicas"]) == (1, 4)
    assert pred["autoScaling"] == {
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {
                        "backend": "prometheus",
                        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                        "query": 'sum(vllm:num_requests_waiting{namespace="ml-serving",'
                        'model_name="app"})',
                    },
                    "target": {"type": "Value", "value": "3"},
                },
            }
        ]
    }
    assert "workerSpec" not in pred
    assert validate(objects) == []


def test_cpu_vllm_sizes_the_kv_cache_by_environment_and_sets_no_gpu_flags():
    model = predictor(build({}, "bare"))["model"]
    assert model["args"] == ["--backend=vllm", "--dtype=auto", "--max-num-seqs=2"]
    # A quarter of the default 4Gi, in whole GiB; no token Secret on this profile.
    assert model["env"] == [
        {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
        {"name": "VLLM_MEDIA_URL_ALLOW_REDIRECTS", "value": "0"},
    ]
    assert model["resources"]["requests"] == {"cpu": "1", "memory": "4Gi"}
    assert model["resources"]["limits"] == model["resources"]["requests"]
    assert "affinity" not in predictor(build({}, "bare"))


@pytest.mark.parametrize(
    ("kv", "gib"), [("3Gi", "3"), ("1536Mi", "1"), ("512Mi", "1"), ("10Gi", "10")]
)
def test_cpu_kv_cache_is_whole_gib_at_least_one(kv, gib):
    model = predictor(build({"serving.kvCacheSize": kv, "resources.memory": "16Gi"}))["model"]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": gib} in model["env"]


def test_cpu_quantities_from_yaml_numbers_become_kubernetes_text():
    model = predictor(build({"resources": {"cpu": 0.5, "memory": 6442450944}}, "bare"))["model"]
    assert model["resources"]["limits"] == {"cpu": "500m", "memory": "6442450944"}


@pytest.mark.parametrize(
    ("capacity", "values"), [("OnDemand", ["on-demand"]), ("Spot", ["spot"]), ("Any", None)]
)
def test_capacity_type_becomes_a_required_node_affinity_term(capacity, values):
    pred = predictor(build(gpu("h100", 1, capacity)))
    terms = pred["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expressions[0] == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-H100-80GB-HBM3"],
    }
    capacity_terms = [e for e in expressions if e["key"] == "karpenter.sh/capacity-type"]
    assert capacity_terms == ([] if values is None else [{**capacity_terms[0], "values": values}])


def test_any_gpu_model_and_any_capacity_need_no_affinity():
    pred = predictor(build(gpu(None, 2)))
    assert "affinity" not in pred
    assert pred["model"]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "--tensor-parallel-size=2" in pred["model"]["args"]


def test_profile_names_its_own_capacity_type_label():
    target = RenderTarget(
        namespace="ml-serving",
        machine_catalog=CATALOG,
        capacity_type_label="eks.amazonaws.com/capacityType",
    )
    pred = predictor(build(gpu("a10g", 1, "Spot"), target=target))
    expressions = pred["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert expressions[-1] == {
        "key": "eks.amazonaws.com/capacityType",
        "operator": "In",
        "values": ["spot"],
    }


def test_amd_gpus_are_requested_as_amd_com_gpu():
    objects = build({"runtime.engine": "vllm-rocm", **gpu("mi300x", 2, vendor="amd")})
    model = predictor(objects)["model"]
    assert model["resources"]["limits"] == {"cpu": "6", "memory": "8Gi", "amd.com/gpu": "2"}
    assert model["runtime"] == "vllm-rocm"
    assert model["modelFormat"] == {"name": "vLLM"}
    assert "args" not in model  # engine flags are vLLM's: a runtime of the user's gets none
    expressions = predictor(objects)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert expressions == [
        {
            "key": "amd.com/gpu.product-name",
            "operator": "In",
            "values": ["AMD_Instinct_MI300X_OAM"],
        }
    ]


def test_custom_runtime_receives_extra_args_only():
    model = predictor(build({"runtime.engine": "my-vllm", "engine.extraArgs": ["--foo=1"]}))[
        "model"
    ]
    assert model["args"] == ["--foo=1"]
    assert model["runtime"] == "my-vllm"


def test_cpu_metric_renders_an_hpa_on_utilization():
    objects = build({"scaling": {"minReplicas": 2, "maxReplicas": 6, "metric": {"cpu": 70}}})
    isvc = kind_of(objects, "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
    pred = isvc["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"]) == (2, 6)
    assert pred["autoScaling"] == {
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 70},
                },
            }
        ]
    }


@pytest.mark.parametrize(
    ("changes", "profile", "low", "high"),
    [
        ({"scaling": {"minReplicas": 3}}, "prod", 3, 3),
        ({**gpu("l4"), "scaling": {"minReplicas": 1, "maxReplicas": 2}}, "bare", 1, 2),
    ],
    ids=["fixed-count", "gpu-range-without-keda"],
)
def test_no_metric_means_no_autoscaler(changes, profile, low, high):
    isvc = kind_of(build(changes, profile), "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"
    pred = isvc["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"]) == (low, high)
    assert "autoScaling" not in pred


def test_fractional_requests_waiting_is_an_exact_threshold():
    pred = predictor(
        build(
            {
                **gpu("h100"),
                "scaling": {"minReplicas": 2, "maxReplicas": 8, "metric": {"requestsWaiting": 1.5}},
            }
        )
    )
    assert pred["autoScaling"]["metrics"][0]["external"]["target"] == {
        "type": "Value",
        "value": "1.5",
    }


def test_prometheus_address_comes_from_the_target():
    target = RenderTarget(namespace="ml-serving", prometheus_url="http://thanos.obs:9090")
    pred = predictor(build({**gpu(None), "scaling.maxReplicas": 3}, target=target))
    assert pred["autoScaling"]["metrics"][0]["external"]["metric"]["serverAddress"] == (
        "http://thanos.obs:9090"
    )


def test_multinode_uses_the_multinode_runtime_and_a_worker_spec():
    changes = {
        "uri": "pvc://models-pvc/llama-3.1-405b",
        "format": "vLLM",
        **gpu("h100", 8, "OnDemand"),
        "resources.nodesPerReplica": 2,
        "resources.cpu": "24",
        "resources.memory": "512Gi",
    }
    objects = build(changes)
    isvc = kind_of(objects, "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"
    pred = isvc["spec"]["predictor"]
    model = pred["model"]
    assert model["runtime"] == "kserve-huggingfaceserver-multinode"
    assert model["modelFormat"] == {"name": "huggingface"}
    # The runtime passes both parallel sizes from workerSpec.
    assert not [a for a in model["args"] if "parallel-size" in a]
    assert "--gpu-memory-utilization=0.9" in model["args"]
    amounts = {"cpu": "24", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert model["resources"]["limits"] == amounts
    assert pred["workerSpec"] == {
        "pipelineParallelSize": 2,
        "tensorParallelSize": 8,
        "containers": [
            {"name": "worker-container", "resources": {"requests": amounts, "limits": amounts}}
        ],
        "affinity": pred["affinity"],
    }
    assert pred["workerSpec"]["affinity"] is not pred["affinity"]
    # storageSecretName is for hf:// downloads only; the volume needs no token.
    assert "serving.kserve.io/storageSecretName" not in isvc["metadata"]["annotations"]


def test_parakeet_renders_its_serving_runtime_first():
    target = RenderTarget(namespace="ml-serving", parakeet_image="registry.local/parakeet:9")
    objects = build({"uri": "hf://nvidia/parakeet-tdt-0.6b-v3"}, target=target)
    assert [o["kind"] for o in objects] == ["ServingRuntime", "InferenceService"]
    runtime, isvc = objects
    assert runtime["metadata"]["name"] == "servedeck-parakeet-app"
    assert runtime["spec"]["supportedModelFormats"][0]["name"] == "parakeet"
    container = runtime["spec"]["containers"][0]
    assert container["image"] == "registry.local/parakeet:9"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == "servedeck-parakeet-app"
    assert model["modelFormat"] == {"name": "parakeet"}
    assert "args" not in model  # vLLM engine flags do not reach the parakeet server
    assert model["storageUri"] == "hf://nvidia/parakeet-tdt-0.6b-v3"


def test_parakeet_image_default_is_the_servedeck_image():
    runtime = build({"uri": "hf://nvidia/parakeet-tdt-0.6b-v3"})[0]
    assert runtime["spec"]["containers"][0]["image"] == PARAKEET_IMAGE
    assert PARAKEET_IMAGE.startswith("ghcr.io/servedeck/parakeet-server:")


@pytest.mark.parametrize(
    ("fmt", "engine", "runtime", "model_format", "protocol"),
    [
        ("SKLearn", None, "kserve-sklearnserver", "sklearn", "v1"),
        ("XGBoost", None, "kserve-xgbserver", "xgboost", "v1"),
        ("LightGBM", None, "kserve-lgbserver", "lightgbm", "v1"),
        ("TensorFlow", None, "kserve-tensorflow-serving", "tensorflow", "v1"),
        ("PyTorch", None, "kserve-torchserve", "pytorch", "v1"),
        ("ONNX", None, "kserve-tritonserver", "onnx", "v2"),
        ("TensorRT", None, "kserve-tritonserver", "tensorrt", "v2"),
        ("Triton", None, "kserve-tritonserver", "triton", "v2"),
        ("MLflow", None, "kserve-mlserver", "mlflow", "v2"),
        ("PMML", None, "kserve-pmmlserver", "pmml", "v2"),
        ("Paddle", None, "kserve-paddleserver", "paddle", "v2"),
        ("XGBoost", "mlserver", "kserve-mlserver", "xgboost", "v2"),
    ],
)
def test_predictive_formats_pick_kserves_runtimes(fmt, engine, runtime, model_format, protocol):
    changes: dict[str, Any] = {
        "uri": "s3://models/m",
        "format": fmt,
        "serving.apiFormat": protocol.upper(),
    }
    if engine:
        changes["runtime.engine"] = engine
    objects = build(changes)
    model = predictor(objects)["model"]
    assert (model["runtime"], model["modelFormat"]["name"]) == (runtime, model_format)
    assert model["protocolVersion"] == protocol
    assert model["storageUri"] == "s3://models/m"
    assert "args" not in model
    assert "env" not in model  # no Hub token for an s3:// artifact served by a predictive runtime
    assert model["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert validate(objects) == []


def test_hf_token_secret_reaches_storage_and_runtime_by_reference_only():
    isvc = kind_of(build({}), "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/storageSecretName"] == "hf-token"
    env = isvc["spec"]["predictor"]["model"]["env"]
    secret = {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert {"name": "HF_TOKEN", "valueFrom": secret} in env


@pytest.mark.parametrize("ref", ["", "env/HF_TOKEN", "secret/"])
def test_a_token_off_the_cluster_is_not_referenced(ref):
    target = RenderTarget(namespace="ml-serving", hf_token_ref=ref)
    isvc = kind_of(build({}, target=target), "InferenceService")
    assert "serving.kserve.io/storageSecretName" not in isvc["metadata"]["annotations"]
    names = [e["name"] for e in isvc["spec"]["predictor"]["model"]["env"]]
    assert "HF_TOKEN" not in names


def test_weight_cache_is_a_cluster_scoped_local_model_cache():
    objects = build({**gpu("l4"), "cache": {"enabled": True, "size": "17Gi"}})
    cache = objects[0]
    assert cache["kind"] == "LocalModelCache"
    assert cache["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert cache["metadata"]["name"].startswith("ml-serving-app-")
    assert cache["spec"] == {
        "sourceModelUri": f"hf://Qwen/Qwen3-8B:{COMMIT}",
        "modelSize": "17Gi",
        "nodeGroups": ["gpu-l4"],
    }
    isvc = kind_of(objects, "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/nodegroup"] == "gpu-l4"
    other = build(
        {**gpu("l4"), "uri": "hf://Qwen/Qwen3-8B", "cache.enabled": True, "cache.size": "17Gi"}
    )
    # sourceModelUri is immutable: another uri is another cache, not a refused update.
    assert other[0]["metadata"]["name"] != cache["metadata"]["name"]


def test_domain_exposure_routes_the_host_to_servedecks_gateway():
    target = RenderTarget(
        namespace="ml-serving",
        addons=frozenset({"gatewayApi"}),
        gateway_name="edge",
        gateway_namespace="infra",
        gateway_service="servedeck/v1-gateway:8080",
    )
    objects = build({"spec.access": DOMAIN}, target=target)
    route = objects[-1]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["kind"] == "HTTPRoute"
    assert route["metadata"]["name"] == "app"
    assert route["spec"] == {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "name": "edge",
                "namespace": "infra",
            }
        ],
        "hostnames": ["app.models.example.com"],
        # Every request goes through ServeDeck's gateway (keys, policy, limits, metering);
        # it adds the runtime's OpenAI prefix itself, so the route rewrites nothing.
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {
                        "kind": "Service",
                        "name": "v1-gateway",
                        "namespace": "servedeck",
                        "port": 8080,
                    }
                ],
            },
        ],
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"uri": PARAKEET},
        predictive("SKLearn"),
        {"serving.apiFormat": "V2"},
        {"spec.source": {"type": "YAML", "inferenceService": YAML_ISVC}},
        {},
    ],
    ids=["parakeet", "predictive", "vllm-v2", "yaml-source", "vllm-openai"],
)
def test_no_route_reaches_the_predictor_directly(changes):
    route = build({**changes, "spec.access": DOMAIN})[-1]
    assert route["spec"]["rules"] == [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [
                {
                    "kind": "Service",
                    "name": "servedeck-gateway",
                    "namespace": "servedeck",
                    "port": 8000,
                }
            ],
        }
    ]


def test_a_gateway_service_in_the_route_namespace_needs_no_namespace():
    target = RenderTarget(
        namespace="ml-serving", addons=frozenset({"gatewayApi"}), gateway_service="ml-serving/gw:80"
    )
    objects = build({"spec.access": DOMAIN}, target=target)
    backend = objects[-1]["spec"]["rules"][0]["backendRefs"]
    assert backend == [{"kind": "Service", "name": "gw", "port": 80}]


@pytest.mark.parametrize("value", ["servedeck-gateway:8000", "ns/name", "ns/name:http", "ns/:80"])
def test_a_malformed_gateway_service_is_a_render_error_naming_the_setting(value):
    target = RenderTarget(addons=frozenset({"gatewayApi"}), gateway_service=value)
    with pytest.raises(RenderError, match="SERVEDECK_GATEWAY_SERVICE.*namespace/name:port"):
        build({"spec.access": DOMAIN}, target=target)


def test_the_gateway_service_comes_from_the_setting(settings, db):
    from tests.helpers import make_org

    settings.SERVEDECK_GATEWAY_SERVICE = "edge/gw:9000"
    profile = make_org("initech").profiles.get()
    assert RenderTarget.from_profile(profile).gateway_service == "edge/gw:9000"


def test_the_namespaces_that_may_call_virtual_machines_come_from_the_setting(settings, db):
    from tests.helpers import make_org

    profile = make_org("initech").profiles.get()
    assert RenderTarget.from_profile(profile).vm_caller_namespaces == ("servedeck",)
    settings.SERVEDECK_VM_CALLER_NAMESPACES = ["edge", "ops"]
    assert RenderTarget.from_profile(profile).vm_caller_namespaces == ("edge", "ops")


def test_default_gateway_is_servedeck_gateway_in_servedeck():
    parent = build({"spec.access": DOMAIN})[-1]["spec"]["parentRefs"][0]
    assert (parent["name"], parent["namespace"]) == ("servedeck-gateway", "servedeck")


def test_internal_exposure_has_no_route():
    assert "HTTPRoute" not in [o["kind"] for o in build({})]


def test_without_gateway_api_the_console_gateway_serves_the_domain():
    target = RenderTarget(namespace="ml-serving", addons=frozenset({"kserve"}))
    assert [o["kind"] for o in build({"spec.access": DOMAIN}, target=target)] == [
        "InferenceService"
    ]


def test_revision_annotation_only_when_given():
    isvc = kind_of(build({}), "InferenceService")
    assert "servedeck.io/revision" not in isvc["metadata"]["annotations"]
    route = build({"spec.access": DOMAIN})[-1]
    assert "annotations" not in route["metadata"]


def test_every_object_carries_the_revision():
    changes = {"uri": PARAKEET, "cache.enabled": True, "cache.size": "3Gi", "spec.access": DOMAIN}
    objects = build(changes, revision=12)
    assert [o["kind"] for o in objects] == [
        "ServingRuntime",
        "LocalModelCache",
        "InferenceService",
        "HTTPRoute",
    ]
    assert {o["metadata"]["annotations"]["servedeck.io/revision"] for o in objects} == {"12"}


@pytest.mark.parametrize("revision", [0, -1, True, "3"])
def test_a_bad_revision_is_refused(revision):
    with pytest.raises(RenderError, match="revision"):
        build({}, revision=revision)


def test_virtual_machine_isolation_is_rendered_by_the_kubevirt_renderer():
    """One field changes containers into virtual machines (test_render_kubevirt.py says more)."""
    kinds = [o["kind"] for o in build({"runtime.isolation": "VirtualMachine"})]
    assert "InferenceService" not in kinds
    assert kinds.count("VirtualMachine") == 1


@pytest.mark.parametrize(
    "manifest",
    [{}, {"spec": {}}, {"spec": {"name": "x", "source": {"type": "Model", "model": {}}}}],
)
def test_a_manifest_that_was_not_filled_in_is_a_render_error(manifest):
    with pytest.raises(RenderError, match="parse"):
        render(manifest, TARGETS["prod"])


def test_render_does_not_change_the_manifest():
    manifest = filled(FULL)
    before = copy.deepcopy(manifest)
    objects = render(manifest, TARGETS["prod"])
    objects[1]["spec"]["predictor"]["model"]["args"].append("--mutated")
    assert manifest == before
    assert render(manifest, TARGETS["prod"]) != objects


def test_to_yaml_is_multi_document_in_build_order_and_to_json_a_list():
    objects = build(
        {
            **gpu("l4"),
            "cache": {"enabled": True, "size": "17Gi"},
            "spec.access": DOMAIN,
        }
    )
    text = to_yaml(objects)
    assert text.startswith("---\napiVersion: serving.kserve.io/v1alpha1\nkind: LocalModelCache\n")
    assert text.count("\n---\n") == 2
    assert "  name: app\n  namespace: ml-serving\n  labels:\n" in text
    assert '{"image"' not in text  # no multimodal here; long values stay on one line
    assert json.loads(to_json(objects)) == {"apiVersion": "v1", "kind": "List", "items": objects}


def test_lora_adapters_are_vllm_flags_set_by_the_platform_read_from_the_hub():
    adapters = [
        {"name": "support", "uri": "hf://acme/support-lora"},
        {"name": "legal", "uri": "hf://acme/legal-lora"},
    ]
    objects = build({"adapters": adapters}, "bare")
    model = predictor(objects)["model"]
    assert model["args"][-8:] == [
        "--enable-lora", "--max-lora-rank", "64", "--max-loras", "2",
        "--lora-modules", "support=acme/support-lora", "legal=acme/legal-lora",
    ]  # fmt: skip
    validate(objects)
