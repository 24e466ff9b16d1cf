"""The dry run of a model in a private S3 bucket (moto's server, the real boto3 client): Check
model reads it with the profile's storageCredentials only, and a Kubernetes profile that gives
its cluster nothing to read it with is refused at the profile, naming the fields to set."""

from __future__ import annotations

import pytest

from jobs.deploy import dry_run
from jobs.models import Profile
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.models_catalog.test_s3_check import tiny_files

ALLOWED = ["ACME_S3_ACCESS_KEY_ID", "ACME_S3_SECRET_ACCESS_KEY"]


def manifest(profile: str, uri: str = "s3://private-models/tiny") -> str:
    return f"""
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: tiny
  profileName: {profile}
  source:
    type: Model
    model:
      uri: {uri}
      format: vLLM
"""


@pytest.fixture
def keys_on_the_host(org, monkeypatch):
    monkeypatch.setenv("ACME_S3_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("ACME_S3_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    org.token_variables = ALLOWED
    org.save()


def at(run, path: str) -> list[str]:
    return [p.message for p in run.refusals if p.path == path]


def test_a_private_artifact_needs_the_clusters_access_on_a_kubernetes_profile(
    org, prod, s3, keys_on_the_host
):
    s3.folder("private-models", "tiny/", tiny_files()[0])
    profile = Profile.objects.get(organization=org, name="prod")
    profile.storage_credentials_ref = "env/ACME_S3"
    profile.save()
    run = dry_run(manifest("prod"), org, server_side=False)
    assert run.check.can_serve, run.check.verdict
    [refusal] = at(run, "spec.profileName")
    assert "s3://private-models/tiny: the artifact is private" in refusal
    assert "storageServiceAccount" in refusal and "storageSecret" in refusal

    profile.storage_secret = "kserve-s3"
    profile.save()
    run = dry_run(manifest("prod"), org, server_side=False)
    assert run.ok, [str(p) for p in run.refusals]
    isvc = next(o for o in run.objects if o["kind"] == "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/storageSecretName"] == "kserve-s3"


def test_a_public_artifact_needs_no_access(org, prod, s3):
    s3.folder("public-models", "tiny/", tiny_files()[0], public=True)
    run = dry_run(manifest("prod", "s3://public-models/tiny"), org, server_side=False)
    assert run.ok, [str(p) for p in run.refusals]
    assert run.check.storage_private is False


def test_without_storage_credentials_check_model_refuses_naming_the_field(org, prod, s3):
    s3.folder("private-models", "tiny/", tiny_files()[0])
    run = dry_run(manifest("prod"), org, server_side=False)
    [at_uri] = at(run, "spec.source.model.uri")
    assert "private" in at_uri and "storageCredentials" in at_uri
    assert "storageServiceAccount" in at_uri  # and what the cluster reads it with
    local = dry_run(manifest("local"), org)
    assert "storageCredentials" in at(local, "spec.source.model.uri")[0]


def test_credentials_taken_back_by_the_operator_are_not_used(org, s3, keys_on_the_host):
    s3.folder("private-models", "tiny/", tiny_files()[0])
    Profile.objects.filter(organization=org, name="local").update(
        storage_credentials_ref="env/ACME_S3"
    )
    assert dry_run(manifest("local"), org).check.can_serve
    org.token_variables = []
    org.save()
    s3.forget()
    run = dry_run(manifest("local"), org)
    [at_uri] = at(run, "spec.source.model.uri")
    assert "storageCredentials 'env/ACME_S3' cannot be used" in at_uri
    assert s3.requests() == []  # refused before anything was read
