"""validate() catches what the cluster would refuse (schema, KServe's webhook and runtime
rules, metadata); where it reads the CRDs from; RenderTarget.from_profile and
render_for_profile on a real (unsaved) Profile.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from accesspolicies.models import Organization
from jobs.models import Cluster, Profile
from jobs.render import (
    CrdDirError,
    RenderTarget,
    crd_dir,
    render,
    render_for_profile,
    validate,
)
from jobs.render.schemas import DEFAULT_CRD_DIR

try:
    from .test_render import CATALOG, DOMAIN, FULL, TARGETS, build, filled, gpu
except ImportError:
    from test_render import CATALOG, DOMAIN, FULL, TARGETS, build, filled, gpu

MULTINODE = {
    "uri": "pvc://models-pvc/llama-3.1-405b",
    "format": "vLLM",
    **gpu("h100", 8),
    "resources.nodesPerReplica": 2,
}


@pytest.fixture(scope="module")
def valid() -> list[dict]:
    # Every kind at once: parakeet's ServingRuntime, the cache, a KEDA-scaled InferenceService
    # and the route. parse refuses vLLM engine fields and requestsWaiting for parakeet, so the
    # metric is set on the filled manifest: the validator sees every object shape.
    changes = {k: v for k, v in FULL.items() if k not in ("engine", "serving", "scaling")}
    manifest = filled({**changes, "spec.access": DOMAIN, "runtime": {"engine": "parakeet"}})
    manifest["spec"]["source"]["model"]["scaling"] = FULL["scaling"]
    objects = render(manifest, TARGETS["prod"], revision=1)
    assert [o["kind"] for o in objects] == [
        "ServingRuntime",
        "LocalModelCache",
        "InferenceService",
        "HTTPRoute",
    ]
    assert validate(objects) == []
    return objects


def broken(objects: list[dict], kind: str, change) -> list[dict]:
    out = copy.deepcopy(objects)
    change(next(o for o in out if o["kind"] == kind))
    return out


def model_of(isvc: dict) -> dict:
    return isvc["spec"]["predictor"]["model"]


def _set(path: str | tuple[str, ...], value):
    """A change at a dotted path, or a tuple of keys where a key has dots (annotations)."""

    def change(obj: dict) -> None:
        *parents, last = path.split(".") if isinstance(path, str) else path
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value

    return change


DELETE = object()
ISVC = "InferenceService"
P = "spec.predictor"
AUTOSCALER = "serving.kserve.io/autoscalerClass"

# (kind, change, a phrase of the one message it must produce)
SCHEMA_CASES = [
    (ISVC, _set(f"{P}.model.storageURI", "hf://x/y"), "'storageURI' was unexpected"),
    (ISVC, _set(f"{P}.minReplicas", "two"), "spec.predictor.minReplicas: 'two' is not of type"),
    (ISVC, _set(f"{P}.maxReplicas", 2**40), "spec.predictor.maxReplicas: 1099511627776 is not"),
    (ISVC, _set(f"{P}.model.modelFormat", {}), "'name' is a required property"),
    (ISVC, _set(f"{P}.model.resources.limits.cpu", "six"), "limits.cpu: 'six' does not match"),
    (ISVC, _set(f"{P}.model.args", "--backend=vllm"), "model.args: '--backend=vllm' is not of"),
    (
        ISVC,
        _set(f"{P}.autoScaling.metrics.0.type", "Custom"),
        "autoScaling.metrics[0].type: 'Custom' is not one of",
    ),
    (
        ISVC,
        _set(f"{P}.model.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "model.env: items 0 and 1 have the same name='A'",
    ),
    (
        ISVC,
        _set(f"{P}.model.ports", [{"containerPort": 8080}, {"containerPort": 8080}]),
        "items 0 and 1 have the same containerPort=8080, protocol='TCP'",
    ),
    ("ServingRuntime", _set("spec.containers", DELETE), "spec: 'containers' is a required"),
    ("ServingRuntime", _set("spec.multiModel", "no"), "spec.multiModel: 'no' is not of type"),
    ("LocalModelCache", _set("spec.nodeGroups", []), "spec.nodeGroups: [] should be non-empty"),
    ("LocalModelCache", _set("spec.modelSize", "17 GB"), "spec.modelSize: '17 GB' does not"),
    ("LocalModelCache", _set("metadata.namespace", "ml"), "'ml' set on a cluster-scoped kind"),
    (ISVC, _set("metadata.namespace", DELETE), "metadata.namespace: missing"),
    (ISVC, _set("metadata.labels.team", "x" * 64), "metadata.labels.team: 'xxxx"),
    (ISVC, _set(("metadata", "annotations", "servedeck.io/revision"), 3), "3 is not text"),
    ("HTTPRoute", _set("metadata.labels.bad key", "v"), "key 'bad key' is not a qualified name"),
]


@pytest.mark.parametrize(("kind", "change", "phrase"), SCHEMA_CASES)
def test_validator_catches_an_invalid_object(valid, kind, change, phrase):
    problems = validate(broken(valid, kind, change))
    assert len(problems) == 1, problems
    assert phrase in problems[0]
    name = next(o for o in valid if o["kind"] == kind)["metadata"]["name"]
    assert problems[0].startswith(f"{kind} ")
    assert name in problems[0].split(":")[0]


ADMISSION_CASES = [
    (_set("metadata.name", "9b-model"), "starts with a letter"),
    (_set("metadata.name", "Qwen"), "metadata.name: 'Qwen' is not a DNS-1123 subdomain"),
    (_set(("metadata", "annotations", AUTOSCALER), "kpa"), "'kpa' is not one of"),
    (_set(f"{P}.minReplicas", 5), "minReplicas: 5 is above maxReplicas 4"),
    (_set(f"{P}.sklearn", {"storageUri": "s3://a/b"}), "sets model, sklearn; KServe accepts"),
    (_set(f"{P}.autoScaling.metrics.0.external.metric.query", ""), "KEDA needs a query"),
    (_set(f"{P}.model.modelFormat.name", "sklearn"), "runtime servedeck-parakeet-app supports"),
    (_set(f"{P}.model.runtime", "kserve-mlserver"), "kserve-mlserver supports lightgbm, mlflow"),
]


@pytest.mark.parametrize(("change", "phrase"), ADMISSION_CASES)
def test_validator_mirrors_kserves_webhook_and_runtime_rules(valid, change, phrase):
    problems = validate(broken(valid, ISVC, change))
    assert [p for p in problems if phrase in p], problems


def test_runtime_protocol_must_be_one_the_runtime_speaks():
    # KServe's MLServer speaks only v2 (manifest.parse refuses apiFormat V1 for it).
    objects = build({"uri": "s3://models/wine", "format": "MLflow"})
    model_of(objects[-1])["protocolVersion"] = "v1"
    assert validate(objects) == [
        "InferenceService ml-serving/app: spec.predictor.model.protocolVersion: 'v1'; runtime "
        "kserve-mlserver speaks v2"
    ]


def test_multinode_storage_and_autoscaler_are_checked():
    objects = build(MULTINODE)
    assert validate(objects) == []
    isvc = objects[-1]
    isvc["spec"]["predictor"]["model"]["storageUri"] = "hf://meta-llama/Llama-3.1-405B"
    isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] = "keda"
    problems = validate(objects)
    assert any("only from pvc:// or oci:// storage" in p for p in problems), problems
    assert any("requires 'none' for a multi-node predictor" in p for p in problems), problems


def test_multinode_range_is_rendered_as_asked_and_reported():
    # KServe runs a multi-node predictor at a fixed count; the renderer does not hide that.
    manifest = filled(MULTINODE)  # parse refuses a range here; the renderer is asked anyway
    manifest["spec"]["source"]["model"]["scaling"] = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "metric": {"requestsWaiting": 2},
    }
    objects = render(manifest, TARGETS["prod"])
    problems = validate(objects)
    assert any("requires 'none' for a multi-node predictor" in p for p in problems), problems


def test_unknown_kserve_kind_and_unserved_version_are_problems(valid):
    isvc = next(o for o in valid if o["kind"] == ISVC)
    odd = {**copy.deepcopy(isvc), "kind": "InferenceGraphish"}
    old = {**copy.deepcopy(isvc), "apiVersion": "serving.kserve.io/v1alpha1"}
    problems = validate([odd, old, "not an object", {"kind": "X"}])
    assert "no InferenceGraphish in KServe's CRDs" in problems[0]
    assert "'serving.kserve.io/v1alpha1'; InferenceService is served as v1beta1" in problems[1]
    assert problems[2] == "object 2: not an object (a mapping with apiVersion, kind and metadata)"
    assert "apiVersion and kind: both required" in problems[3]


def test_other_apis_get_the_metadata_check_only(valid):
    route = copy.deepcopy(valid[-1])
    route["spec"]["anything"] = {"goes": True}
    assert validate([route]) == []


def test_crd_directory_default_is_the_shared_reference():
    assert crd_dir() == DEFAULT_CRD_DIR
    assert DEFAULT_CRD_DIR.is_dir()
    assert (DEFAULT_CRD_DIR / "serving.kserve.io_inferenceservices.yaml").is_file()


def test_crd_directory_from_the_environment(valid, settings, monkeypatch, tmp_path):
    del settings.KSERVE_CRD_DIR  # whether or not console/settings.py defines it
    missing = tmp_path / "no-crds"
    monkeypatch.setenv("KSERVE_CRD_DIR", str(missing))
    assert crd_dir() == missing
    with pytest.raises(CrdDirError, match="KSERVE_CRD_DIR"):
        validate(valid)


def test_crd_directory_setting_wins_over_the_environment(valid, settings, monkeypatch, tmp_path):
    monkeypatch.setenv("KSERVE_CRD_DIR", str(tmp_path / "from-env"))
    settings.KSERVE_CRD_DIR = str(tmp_path / "from-setting")
    assert crd_dir() == tmp_path / "from-setting"
    assert crd_dir(DEFAULT_CRD_DIR) == DEFAULT_CRD_DIR  # the caller's wins over both
    assert validate(valid, DEFAULT_CRD_DIR) == []
    with pytest.raises(CrdDirError, match="from-setting"):
        validate(valid)


def test_crd_directory_holding_only_some_crds(valid, tmp_path):
    # A folder without the InferenceService CRD: its objects cannot be checked, and say so.
    (tmp_path / "readme.yaml").write_text("kind: Nothing\n")
    problems = validate(valid, tmp_path)
    assert any("no InferenceService in KServe's CRDs" in p for p in problems)


# --- RenderTarget from a Profile -----------------------------------------------------------------


def profile(**kw) -> Profile:
    cluster = Cluster(name="gpu-cluster", backend="kubernetes", addons=["kserve", "keda"])
    values = {
        "name": "prod",
        "namespace": "team-a",
        "organization": Organization(slug="acme", name="Acme Corp"),
        "cluster": cluster,
        "machine_catalog": list(CATALOG),
        "hf_token_ref": "secret/hf-token",
        "defaults": {
            "capacityTypeLabel": "eks.amazonaws.com/capacityType",
            "gatewayName": "edge",
            "prometheusUrl": " http://thanos.obs:9090 ",
            "unrelated": 3,
            "gatewayNamespace": "",
        },
    }
    values.update(kw)
    return Profile(**values)


def test_target_from_profile_reads_the_profile_and_its_defaults():
    target = RenderTarget.from_profile(profile())
    assert target.namespace == "team-a"
    assert target.machine_catalog == CATALOG
    assert target.addons == frozenset({"kserve", "keda"})
    assert target.hf_secret_name == "hf-token"
    assert target.capacity_type_label == "eks.amazonaws.com/capacityType"
    assert target.gateway_name == "edge"
    assert target.gateway_namespace == "servedeck"  # blank is not a value
    assert target.prometheus_url == "http://thanos.obs:9090"
    assert (target.organization, target.organization_name) == ("acme", "Acme Corp")


@pytest.mark.parametrize("defaults", [{}, None, "not a mapping"])
def test_target_from_profile_without_defaults(defaults):
    target = RenderTarget.from_profile(profile(defaults=defaults, hf_token_ref="env/HF_TOKEN"))
    assert target.capacity_type_label == "karpenter.sh/capacity-type"
    assert target.hf_secret_name is None


def test_render_for_profile_is_render_with_the_profiles_target():
    manifest = filled({**gpu("l4", 1, "Spot"), "scaling": {"minReplicas": 1, "maxReplicas": 2}})
    prof = profile()
    objects = render_for_profile(manifest, prof, revision=4)
    assert objects == render(manifest, RenderTarget.from_profile(prof), revision=4)
    isvc = objects[-1]
    expressions = isvc["spec"]["predictor"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert expressions[-1]["key"] == "eks.amazonaws.com/capacityType"
    query = isvc["spec"]["predictor"]["autoScaling"]["metrics"][0]["external"]["metric"]
    assert query["serverAddress"] == "http://thanos.obs:9090"
    # The manifest's namespace (from its own profile) is where the objects go.
    assert isvc["metadata"]["namespace"] == "ml-serving"
    assert validate(objects) == []


def test_targets_are_plain_frozen_data():
    with pytest.raises(AttributeError):
        TARGETS["prod"].namespace = "x"  # type: ignore[misc]
    assert Path(DEFAULT_CRD_DIR).name == "crd"
