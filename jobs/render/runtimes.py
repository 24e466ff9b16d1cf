"""Which serving runtime serves a manifest, under which KServe model format name, and the
ServeDeck speech-to-text ServingRuntime (parakeet) that KServe does not install.

Names follow the ClusterServingRuntimes KServe installs (reference/kserve/runtimes/): KServe
matches `modelFormat.name` exactly against a runtime's `supportedModelFormats`, so each
format maps to the lowercase name those runtimes declare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .common import KSERVE_ALPHA_API, metadata

HUGGINGFACE_RUNTIME = "kserve-huggingfaceserver"
HUGGINGFACE_MULTINODE_RUNTIME = "kserve-huggingfaceserver-multinode"
HUGGINGFACE_FORMAT = "huggingface"
# Where KServe's model server mounts the OpenAI routes (/openai/v1/chat/completions, …).
HUGGINGFACE_OPENAI_PREFIX = "/openai"
PARAKEET_RUNTIME = "servedeck-parakeet"
PARAKEET_FORMAT = "parakeet"
PARAKEET_PORT = 8080

# manifest runtime.engine -> the ClusterServingRuntime KServe installs for it.
ENGINE_RUNTIMES = {
    "triton": "kserve-tritonserver",
    "torchserve": "kserve-torchserve",
    "tensorflow": "kserve-tensorflow-serving",
    "sklearn": "kserve-sklearnserver",
    "xgboost": "kserve-xgbserver",
    "lightgbm": "kserve-lgbserver",
    "mlserver": "kserve-mlserver",
    "kserve-pmmlserver": "kserve-pmmlserver",
    "kserve-paddleserver": "kserve-paddleserver",
}
# manifest format -> KServe modelFormat.name.
FORMAT_NAMES = {
    "vLLM": HUGGINGFACE_FORMAT,
    "SKLearn": "sklearn",
    "XGBoost": "xgboost",
    "LightGBM": "lightgbm",
    "TensorFlow": "tensorflow",
    "PyTorch": "pytorch",
    "ONNX": "onnx",
    "TensorRT": "tensorrt",
    "Triton": "triton",
    "MLflow": "mlflow",
    "PMML": "pmml",
    "Paddle": "paddle",
}
# A runtime of the user's is not the Hugging Face server, so a vLLM model is declared under the
# manifest's own word, which is also the format name of KServe's plain vLLM runtime.
CUSTOM_VLLM_FORMAT = "vLLM"

RuntimeKind = Literal["vllm", "parakeet", "predictive", "custom"]


@dataclass(frozen=True)
class Runtime:
    name: str  # the ServingRuntime or ClusterServingRuntime the predictor names
    model_format: str  # predictor.model.modelFormat.name
    kind: RuntimeKind
    multinode: bool = False


def choose_runtime(app: str, engine: str, fmt: str, multinode: bool) -> Runtime:
    """The runtime for runtime.engine (already chosen from format by manifest.parse)."""
    if engine == "vllm":
        # The Hugging Face server with --backend=vllm, not kserve-vllmserver: it is installed by
        # every KServe since 0.13 (vllmserver only by the newest), its CPU image carries vLLM
        # too, and the multi-node runtime is the same server, so one set of arguments serves all.
        name = HUGGINGFACE_MULTINODE_RUNTIME if multinode else HUGGINGFACE_RUNTIME
        return Runtime(name, HUGGINGFACE_FORMAT, "vllm", multinode)
    if engine == "parakeet":
        return Runtime(parakeet_runtime_name(app), PARAKEET_FORMAT, "parakeet")
    if engine in ENGINE_RUNTIMES:
        return Runtime(ENGINE_RUNTIMES[engine], FORMAT_NAMES[fmt], "predictive")
    model_format = CUSTOM_VLLM_FORMAT if fmt == "vLLM" else FORMAT_NAMES[fmt]
    return Runtime(engine, model_format, "custom", multinode)


def parakeet_runtime_name(app: str) -> str:
    # One runtime per application, not one shared per namespace: a shared object would carry
    # the application label of whichever application applied it last, and deleting one
    # application would delete the runtime another still uses.
    return f"{PARAKEET_RUNTIME}-{app}"


def parakeet_serving_runtime(
    app: str, namespace: str, labels: dict[str, str], image: str
) -> dict[str, Any]:
    """The ServingRuntime of ServeDeck's speech-to-text server (OpenAI /v1/audio/transcriptions)."""
    return {
        "apiVersion": KSERVE_ALPHA_API,
        "kind": "ServingRuntime",
        "metadata": metadata(parakeet_runtime_name(app), namespace, labels),
        "spec": {
            "annotations": {
                "prometheus.kserve.io/port": str(PARAKEET_PORT),
                "prometheus.kserve.io/path": "/metrics",
            },
            "supportedModelFormats": [
                {"name": PARAKEET_FORMAT, "version": "1", "autoSelect": False, "priority": 1}
            ],
            "protocolVersions": ["v1"],
            "containers": [
                {
                    "name": "kserve-container",
                    "image": image,
                    "args": [
                        "--model_name={{.Name}}",
                        "--model_dir=/mnt/models",
                        f"--http_port={PARAKEET_PORT}",
                    ],
                    "ports": [{"name": "http", "containerPort": PARAKEET_PORT, "protocol": "TCP"}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {
                        "requests": {"cpu": "1", "memory": "2Gi"},
                        "limits": {"cpu": "1", "memory": "2Gi"},
                    },
                }
            ],
        },
    }
