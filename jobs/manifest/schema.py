"""The manifest's field tree (allowed keys, types, enums, static ranges) and the reader that
checks a document against it, turning each value into a typed value or a Bad marker.

Only rules that need no other field live here; everything cross-field is in rules.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from . import adapters
from .checks import (
    DNS_LABEL_ACCEPTS,
    DURATION_ACCEPTS,
    INT32_MAX,
    STEPS_ACCEPTS,
    Bad,
    Reject,
    boolean,
    byte_quantity,
    cpu_quantity,
    dns_label,
    domain_name,
    duration,
    enum,
    exact,
    identifier,
    nonempty_text,
    number,
    percent_steps,
    plain_copy,
    strings,
    uri,
    whole,
)
from .problems import Problem, child_path, given, show
from .quantity import parse_quantity

API_VERSION = "servedeck.io/v1"
KIND = "Application"

FORMATS = (
    "vLLM",
    "SKLearn",
    "XGBoost",
    "LightGBM",
    "TensorFlow",
    "PyTorch",
    "ONNX",
    "TensorRT",
    "Triton",
    "MLflow",
    "PMML",
    "Paddle",
)
GENERATIVE_FORMATS = frozenset({"vLLM"})
# The runtimes docs/manifest.md names; any other DNS-1123 name is a serving runtime of the user's.
ENGINES = (
    "vllm",
    "parakeet",
    "triton",
    "torchserve",
    "tensorflow",
    "sklearn",
    "xgboost",
    "lightgbm",
    "mlserver",
)
FORMAT_ENGINE = {
    "vLLM": "vllm",
    "SKLearn": "sklearn",
    "XGBoost": "xgboost",
    "LightGBM": "lightgbm",
    "TensorFlow": "tensorflow",
    "PyTorch": "torchserve",
    "ONNX": "triton",
    "TensorRT": "triton",
    "Triton": "triton",
    "MLflow": "mlserver",
    "PMML": "kserve-pmmlserver",
    "Paddle": "kserve-paddleserver",
}
# Which formats each runtime the platform installs can load (KServe's supportedModelFormats
# of the matching ClusterServingRuntime), so a pinned engine that cannot load the format is
# refused at the dry run instead of crash-looping on the cluster.
ENGINE_FORMATS = {
    "vllm": frozenset({"vLLM"}),
    "parakeet": frozenset({"vLLM"}),
    "triton": frozenset({"TensorRT", "TensorFlow", "ONNX", "PyTorch", "Triton"}),
    "torchserve": frozenset({"PyTorch"}),
    "tensorflow": frozenset({"TensorFlow"}),
    "sklearn": frozenset({"SKLearn"}),
    "xgboost": frozenset({"XGBoost"}),
    "lightgbm": frozenset({"LightGBM"}),
    "mlserver": frozenset({"SKLearn", "XGBoost", "LightGBM", "MLflow"}),
    "kserve-pmmlserver": frozenset({"PMML"}),
    "kserve-paddleserver": frozenset({"Paddle"}),
}
INSTALLED_RUNTIMES = frozenset(ENGINE_FORMATS)
PARAKEET_REPO = "nvidia/parakeet-tdt-0.6b-v3"
# The runtime each engine the platform installs runs on, and the protocolVersions it declares
# (reference/kserve/runtimes/<runtime>.yaml; parakeet's is ServeDeck's own ServingRuntime).
# KServe refuses a predictor whose protocolVersion its runtime does not declare, so apiFormat
# defaults from, and is checked against, these.
ENGINE_PROTOCOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm": ("kserve-huggingfaceserver", ("v2", "v1")),
    "parakeet": ("servedeck-parakeet", ("v1",)),
    "triton": ("kserve-tritonserver", ("v2", "grpc-v2")),
    "torchserve": ("kserve-torchserve", ("v1", "v2", "grpc-v2")),
    "tensorflow": ("kserve-tensorflow-serving", ("v1", "grpc-v1")),
    "sklearn": ("kserve-sklearnserver", ("v1", "v2")),
    "xgboost": ("kserve-xgbserver", ("v1", "v2")),
    "lightgbm": ("kserve-lgbserver", ("v1", "v2")),
    "mlserver": ("kserve-mlserver", ("v2",)),
    "kserve-pmmlserver": ("kserve-pmmlserver", ("v1", "v2")),
    "kserve-paddleserver": ("kserve-paddleserver", ("v1", "v2")),
}
assert set(ENGINE_PROTOCOLS) == INSTALLED_RUNTIMES
# apiFormat -> the KServe protocolVersion it is rendered as (OpenAI needs none).
API_PROTOCOLS = {"V1": "v1", "V2": "v2"}


def api_formats(engine: str | None, generative: bool) -> tuple[str, ...] | None:
    """The apiFormats the runtime of engine speaks, the default first; None when unknown (a
    runtime of the user's). V1 is the predictive protocol, never a generative model's."""
    if engine not in ENGINE_PROTOCOLS:
        return None
    protocols = ENGINE_PROTOCOLS[engine][1]
    spoken = [f for f in ("V1", "V2") if API_PROTOCOLS[f] in protocols]
    if generative:
        return ("OpenAI", *(f for f in spoken if f != "V1"))
    return tuple(spoken)


SOURCE_TYPES = ("Model", "YAML")
SYNC_TYPES = ("Auto", "Manual")
EXPOSURES = ("Internal", "Domain")
ISOLATIONS = ("Container", "VirtualMachine")
DTYPES = ("auto", "bfloat16", "float16", "float32")
GPU_VENDORS = ("nvidia", "amd")
CAPACITY_TYPES = ("OnDemand", "Spot", "Any")
API_FORMATS = ("OpenAI", "V1", "V2")


@dataclass(frozen=True)
class Leaf:
    check: Callable[[Any], Any]
    accepts: str
    example: str
    required: bool = False
    default: str = ""  # how the default reads in a fix ("Auto", "the profile's namespace")


@dataclass(frozen=True)
class Group:
    fields: dict[str, Any]
    accepts: str = "a mapping"
    required: bool = False


@dataclass(frozen=True)
class Opaque:
    """Free-form data: copied as plain JSON-like data (a raw InferenceService), or ignored."""

    accepts: str = "a mapping"
    copy: bool = True


# --- the tree, in the order the filled-in manifest is written ------------------------------

_ONE_TO_64 = "a whole number from 1 to 64"
REPLICAS_ACCEPTS = f"a whole number from 1 to {INT32_MAX}"

METRIC = Group(
    {
        "cpu": Leaf(whole(1, 100), "a whole percent from 1 to 100", "80"),
        "requestsWaiting": Leaf(
            number(0, 1e6, low_open=True), "a positive number of waiting requests", "2"
        ),
    },
    accepts="a mapping with exactly one of cpu or requestsWaiting",
)

MODEL = Group(
    {
        "uri": Leaf(
            uri,
            "hf://<org>/<repo>[:<revision>], s3://<bucket>/<key>, gs://<bucket>/<object>, "
            "pvc://<claim>/<path>, oci://<registry>/<repo>[:<tag>|@sha256:<digest>] or "
            "https://<account>.blob.core.windows.net/<container>/<path>",
            "hf://BAAI/bge-m3",
            required=True,
        ),
        "format": Leaf(enum(*FORMATS), ", ".join(FORMATS), "vLLM", default="vLLM for hf://"),
        "runtime": Group(
            {
                "engine": Leaf(
                    dns_label,
                    ", ".join(ENGINES) + ", or the name of a serving runtime on the cluster",
                    "vllm",
                    default="chosen from format",
                ),
                "isolation": Leaf(
                    enum(*ISOLATIONS),
                    "Container or VirtualMachine",
                    "Container",
                    default="Container",
                ),
            }
        ),
        "engine": Group(
            {
                "dtype": Leaf(enum(*DTYPES), ", ".join(DTYPES), "auto", default="auto"),
                "quantization": Leaf(
                    identifier,
                    "a quantisation method such as awq, gptq, fp8, bitsandbytes, "
                    "gguf, or null for none",
                    "awq",
                    default="none",
                ),
                "tensorParallelSize": Leaf(
                    whole(1, 64),
                    _ONE_TO_64 + " equal to countPerReplica",
                    "1",
                    default="countPerReplica",
                ),
                "pipelineParallelSize": Leaf(
                    whole(1, 64),
                    _ONE_TO_64 + " equal to nodesPerReplica",
                    "1",
                    default="nodesPerReplica",
                ),
                "reasoningParser": Leaf(
                    identifier,
                    "a reasoning parser name the runtime knows",
                    "deepseek_r1",
                    default="none",
                ),
                "toolCallParser": Leaf(
                    identifier,
                    "a tool-call parser name the runtime knows",
                    "hermes",
                    default="none",
                ),
                "gpuMemoryUtilization": Leaf(
                    number(0.1, 0.99), "a number from 0.1 to 0.99", "0.9", default="0.9"
                ),
                "extraArgs": Leaf(strings, "a list of text arguments", '["--enforce-eager"]'),
            }
        ),
        "serving": Group(
            {
                "apiFormat": Leaf(
                    enum(*API_FORMATS), "OpenAI or V2 (generative); V1 or V2 (predictive)", "OpenAI"
                ),
                "maxContextTokens": Leaf(
                    whole(1),
                    "a whole number of tokens, 1 or more",
                    "8192",
                    default="the runtime's own",
                ),
                "kvCacheSize": Leaf(byte_quantity, "a quantity of bytes above zero", "2Gi"),
                "maxConcurrentRequests": Leaf(
                    whole(1, 1024), "a whole number from 1 to 1024", "16"
                ),
                "multimodal": Group(
                    {
                        "maxImagesPerPrompt": Leaf(whole(1), "a whole number, 1 or more", "4"),
                        "maxVideosPerPrompt": Leaf(whole(1), "a whole number, 1 or more", "1"),
                        "maxAudioClipsPerPrompt": Leaf(whole(1), "a whole number, 1 or more", "1"),
                    },
                    accepts="a mapping with at least one of maxImagesPerPrompt, "
                    "maxVideosPerPrompt, maxAudioClipsPerPrompt",
                ),
            }
        ),
        "resources": Group(
            {
                "cpu": Leaf(cpu_quantity, "CPU cores above zero, such as 500m, 2 or 1.5", "2"),
                "memory": Leaf(
                    byte_quantity, "a whole number of bytes above zero, such as 8Gi", "8Gi"
                ),
                "accelerator": Group(
                    {
                        "gpu": Group(
                            {
                                "vendor": Leaf(
                                    enum(*GPU_VENDORS),
                                    "nvidia or amd",
                                    "nvidia",
                                    default="nvidia",
                                ),
                                "model": Leaf(
                                    nonempty_text,
                                    "a GPU model of the profile's machine catalog, or null for any",
                                    "l4",
                                    default="any GPU",
                                ),
                                "countPerReplica": Leaf(
                                    whole(1, 64), _ONE_TO_64, "1", required=True
                                ),
                                "capacityType": Leaf(
                                    enum(*CAPACITY_TYPES),
                                    "OnDemand, Spot or Any",
                                    "Any",
                                    default="Any",
                                ),
                            }
                        ),
                    }
                ),
                "nodesPerReplica": Leaf(whole(1, 64), _ONE_TO_64, "1", default="1"),
            }
        ),
        "scaling": Group(
            {
                "minReplicas": Leaf(
                    whole(0, INT32_MAX),
                    f"a whole number from 0 to {INT32_MAX} (0: the model sleeps when idle)",
                    "1",
                    default="1",
                ),
                "maxReplicas": Leaf(
                    whole(
                        1,
                        INT32_MAX,
                        zero="0 is not accepted: for scale to zero, set minReplicas to 0",
                    ),
                    REPLICAS_ACCEPTS + ", not below minReplicas",
                    "2",
                    default="minReplicas",
                ),
                "scaleToZeroAfter": Leaf(
                    duration, DURATION_ACCEPTS, "15m", default="15m with minReplicas 0"
                ),
                "metric": METRIC,
            }
        ),
        "queue": Group({"name": Leaf(dns_label, "a ClusterQueue of the profile", "default")}),
        "cache": Group(
            {
                "enabled": Leaf(boolean, "true or false", "true", default="false"),
                "size": Leaf(byte_quantity, "a quantity of bytes above zero, such as 30Gi", "30Gi"),
                "nodeGroup": Leaf(nonempty_text, "a node group with a weight cache", "gpu-l4"),
            }
        ),
        "adapters": Leaf(
            adapters.shape,
            adapters.ACCEPTS,
            '[{name: support-lora, uri: "hf://org/support-lora"}]',
            default="none",
        ),
    }
)

ROLLOUT_STRATEGIES = ("Replace", "Canary")
ROLLOUT = Group(
    {
        "strategy": Leaf(
            enum(*ROLLOUT_STRATEGIES),
            "Replace (the new revision takes every request at once) or Canary",
            "Canary",
            default="Replace",
        ),
        "steps": Leaf(percent_steps, STEPS_ACCEPTS, "[10, 50]", default="[10, 50] with Canary"),
        "stepDuration": Leaf(duration, DURATION_ACCEPTS, "10m", default="10m with Canary"),
        "maxErrorRateIncrease": Leaf(
            number(0, 1),
            "a fraction from 0 to 1 (0.02: two more server errors in a hundred requests)",
            "0.02",
            default="0.02 with Canary",
        ),
        "maxLatencyIncrease": Leaf(
            number(0, 100),
            "a fraction from 0 to 100 (0.25: a quarter slower)",
            "0.25",
            default="0.25 with Canary",
        ),
        "minRequests": Leaf(
            whole(1, 1_000_000),
            "a whole number from 1 to 1000000",
            "100",
            default="100 with Canary",
        ),
    }
)

SPEC = Group(
    {
        "name": Leaf(dns_label, DNS_LABEL_ACCEPTS, "bge-embed", required=True),
        "profileName": Leaf(
            nonempty_text, "the name of a deployment profile", "prod-inference", required=True
        ),
        "namespace": Leaf(
            dns_label, DNS_LABEL_ACCEPTS, "ml-serving", default="the profile's namespace"
        ),
        "syncType": Leaf(enum(*SYNC_TYPES), "Auto or Manual", "Auto", default="Auto"),
        "rollout": ROLLOUT,
        "access": Group(
            {
                "exposure": Leaf(
                    enum(*EXPOSURES), "Internal or Domain", "Internal", default="Internal"
                ),
                "domain": Leaf(
                    domain_name, "a domain verified by the organisation", "models.example.com"
                ),
                "accessPolicy": Leaf(
                    nonempty_text, "an access policy of the organisation", "default"
                ),
            }
        ),
        "source": Group(
            {
                "type": Leaf(enum(*SOURCE_TYPES), "Model or YAML", "Model", required=True),
                "model": MODEL,
                "inferenceService": Opaque("a KServe InferenceService mapping"),
            },
            required=True,
        ),
    },
    required=True,
)

DOCUMENT = Group(
    {
        "apiVersion": Leaf(exact(API_VERSION), API_VERSION, API_VERSION, required=True),
        "kind": Leaf(exact(KIND), KIND, KIND, required=True),
        "spec": SPEC,
        "status": Opaque("anything (read-only, ignored)", copy=False),
    },
    accepts="a mapping with apiVersion, kind and spec",
)


def _index(group: Group, prefix: str, out: dict[str, list[str]]) -> dict[str, list[str]]:
    for name, node in group.fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.setdefault(name, []).append(path)
        if isinstance(node, Group):
            _index(node, path, out)
    return out


# Where each field name lives, to say "it belongs in spec.source.model.scaling" when a
# field is written at the wrong level (the commonest mistake after a typo).
_WHERE = _index(DOCUMENT, "", {})


# --- the reader -----------------------------------------------------------------------------


def read(node: Any, value: Any, path: str, problems: list[Problem]) -> Any:
    """Check value against node; returns typed data, None (absent/null) or Bad."""
    if isinstance(node, Leaf):
        try:
            return node.check(value)
        except Reject as exc:
            problems.append(Problem(path, leaf_message(path, node, exc)))
            return Bad(value)
    if isinstance(node, Opaque):
        return plain_copy(value, path, problems) if node.copy else None
    if not isinstance(value, Mapping):
        problems.append(
            Problem(
                path,
                f"{given(value)}, not a mapping; accepts {node.accepts}. "
                f"Write it as a mapping of fields ({', '.join(node.fields)}).",
            )
        )
        return Bad(value)
    out: dict[str, Any] = {}
    for key in value:
        if key not in node.fields:
            problems.append(Problem(child_path(path, key), unknown_message(path, key, node)))
    for name, child in node.fields.items():
        item = value.get(name)
        at = child_path(path, name)
        if item is None:
            if getattr(child, "required", False):
                problems.append(Problem(at, required_message(name, child)))
            out[name] = None
        else:
            out[name] = read(child, item, at, problems)
    return out


def last(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def leaf_message(path: str, node: Leaf, exc: Reject) -> str:
    name = last(path)
    fix = exc.fix
    if fix is None:
        fix = f"Set {name} to {node.example}"
        fix += (
            "."
            if node.required or not node.default
            else (f", or leave it out for the default ({node.default}).")
        )
    return f"{exc.reason}; accepts {node.accepts}. {fix}"


def required_message(name: str, node: Any) -> str:
    if isinstance(node, Leaf):
        example = f"{name}: {node.example}"
        return f"required, missing; accepts {node.accepts}. Add it, for example {example}."
    return f"required, missing; accepts {node.accepts}. Add the {name} block."


def unknown_message(path: str, key: Any, node: Group) -> str:
    fields = list(node.fields)
    listed = ", ".join(f for f in fields if f != "status") if path == "" else ", ".join(fields)
    if not isinstance(key, str):
        return f"{show(key)} is not a field name; accepts the fields {listed}."
    lowered = {f.lower(): f for f in fields}
    if key.lower() in lowered:
        return (
            f"unknown field; did you mean {lowered[key.lower()]}? (field names are case-sensitive)"
        )
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    elsewhere = [p for p in _WHERE.get(key, ()) if p.rsplit(".", 1)[0] != path]
    if elsewhere:
        return (
            f"unknown field here; accepts the fields {listed}. {key} belongs in "
            f"{elsewhere[0]}: move it there."
        )
    return f"unknown field; accepts the fields {listed}. Remove it or correct its name."


def quantity_amount(value: Any) -> Fraction | None:
    """Best-effort exact amount of a quantity from outside data (a machine catalog)."""
    try:
        return parse_quantity(value)
    except ValueError:
        return None
