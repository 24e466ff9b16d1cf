"""Private artifacts rendered the way KServe's storage initializer reads them: the predictor runs
as the profile's ServiceAccount, KServe's storage Secret is named by its annotation for a
bucket (never the Hub token's Secret), and an oci:// model image (a modelcar) is pulled with
the profile's pull Secret; each validated against KServe's real CRDs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from accesspolicies.models import Organization
from jobs.models import Cluster, Profile
from jobs.render import RenderTarget, render_for_profile, validate

try:
    from .test_render import TARGETS, build, filled, kind_of, predictor
except ImportError:
    from test_render import TARGETS, build, filled, kind_of, predictor

SECRET_ANNOTATION = "serving.kserve.io/storageSecretName"
DIGEST = "sha256:" + "ab" * 32
ACCESS = replace(
    TARGETS["prod"],
    storage_service_account="s3-reader",
    storage_secret="kserve-s3",
    image_pull_secret="registry-pull",
)


def annotations(objects: list[dict]) -> dict:
    return kind_of(objects, "InferenceService")["metadata"]["annotations"]


@pytest.mark.parametrize(
    "uri",
    [
        "s3://models/qwen3-8b/?versionId=3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        "gs://models/qwen3-8b",
        "https://acme.blob.core.windows.net/models/qwen3-8b",
    ],
)
def test_a_bucket_is_read_through_the_service_account_and_the_storage_secret(uri):
    objects = build({"uri": uri, "format": "vLLM"}, target=ACCESS)
    spec = predictor(objects)
    assert spec["serviceAccountName"] == "s3-reader"
    assert annotations(objects)[SECRET_ANNOTATION] == "kserve-s3"
    assert spec["model"]["storageUri"] == uri
    assert "imagePullSecrets" not in spec  # a bucket pulls no image
    # The Hub token's Secret is for hf:// only: never handed to a bucket's initializer.
    assert "HF_TOKEN" not in str(spec["model"].get("env", []))
    assert validate(objects) == []


def test_a_bucket_without_access_renders_no_reference():
    objects = build({"uri": "s3://models/m", "format": "ONNX"})  # prod: an hf token Secret only
    assert SECRET_ANNOTATION not in annotations(objects)
    assert "serviceAccountName" not in predictor(objects)
    assert validate(objects) == []


def test_a_service_account_alone_serves_a_bucket_with_a_cloud_role():
    target = replace(TARGETS["bare"], storage_service_account="irsa-reader")
    objects = build({"uri": "s3://models/m", "format": "ONNX"}, "bare", target=target)
    assert predictor(objects)["serviceAccountName"] == "irsa-reader"
    assert SECRET_ANNOTATION not in annotations(objects)
    assert validate(objects) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"uri": f"oci://ghcr.io/acme/qwen3-8b@{DIGEST}", "format": "vLLM"},
        {"uri": "oci://registry.acme.internal:5000/models/iris:v3", "format": "SKLearn"},
    ],
)
def test_an_oci_model_image_is_a_modelcar_pulled_with_the_pull_secret(changes):
    objects = build(changes, target=ACCESS)
    spec = predictor(objects)
    assert spec["model"]["storageUri"] == changes["uri"]
    assert spec["imagePullSecrets"] == [{"name": "registry-pull"}]
    assert SECRET_ANNOTATION not in annotations(objects)  # no bucket to read
    assert validate(objects) == []


def test_an_hf_model_keeps_the_hub_tokens_secret_and_runs_as_the_service_account():
    objects = build({}, target=ACCESS)
    assert annotations(objects)[SECRET_ANNOTATION] == "hf-token"
    assert predictor(objects)["serviceAccountName"] == "s3-reader"
    assert "imagePullSecrets" not in predictor(objects)
    assert validate(objects) == []


def test_the_crds_check_what_is_rendered():
    objects = build({"uri": f"oci://ghcr.io/acme/m@{DIGEST}", "format": "vLLM"}, target=ACCESS)
    predictor(objects)["imagePullSecrets"] = "registry-pull"
    assert any("imagePullSecrets" in p for p in validate(objects))


def test_the_target_reads_the_profiles_access():
    cluster = Cluster(name="gpu", backend="kubernetes", addons=["kserve"])
    profile = Profile(
        name="prod",
        namespace="ml-serving",
        organization=Organization(slug="acme", name="Acme"),
        cluster=cluster,
        storage_service_account="s3-reader",
        storage_secret="kserve-s3",
        image_pull_secret="registry-pull",
    )
    target = RenderTarget.from_profile(profile)
    assert (target.storage_service_account, target.storage_secret, target.image_pull_secret) == (
        "s3-reader",
        "kserve-s3",
        "registry-pull",
    )
    manifest = filled({"uri": "s3://models/qwen", "format": "vLLM"})
    objects = render_for_profile(manifest, profile)
    assert predictor(objects)["serviceAccountName"] == "s3-reader"
