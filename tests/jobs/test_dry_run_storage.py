"""The dry run and deploy of a model in a private S3 bucket (moto's server, the real boto3
client): Check model reads it with the profile's storageCredentials only, a Kubernetes profile
that gives its cluster nothing to read it with is refused at the profile, naming the fields to
set, and the local profile checks, deploys and serves it."""

from __future__ import annotations

import pytest

from jobs.deploy import dry_run
from jobs.models import Profile
from tests.fakes.kube_objects import node
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.models_catalog.bucket_check_support import tiny_files

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


def test_a_private_s3_model_is_checked_deployed_and_served_on_the_local_profile(
    org, deployer, s3, keys_on_the_host, cpu_machine, settings, tmp_path
):
    from jobs import deploy as verbs
    from jobs.backends.local.backend import local_runner
    from tests.fakes.cpu_runtime import install_fake
    from tests.jobs.backends.local.test_local_cpu_wiring import running

    install_fake(cpu_machine[0])
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    s3.folder("private-models", "tiny/", tiny_files()[0], versioned=True)
    text = manifest("local").replace(
        "format: vLLM", "format: vLLM\n      resources: {cpu: '1', memory: 2Gi}"
    )
    refused = dry_run(text, org)
    assert "storageCredentials" in at(refused, "spec.source.model.uri")[0]
    Profile.objects.filter(organization=org, name="local").update(
        storage_credentials_ref="env/ACME_S3"
    )
    checked = dry_run(text, org)
    assert checked.ok, [str(p) for p in checked.refusals]
    application = verbs.apply(text, deployer).application
    status = running(local_runner("acme"), application.name)
    assert status.phase == "Running"
    log = "\n".join(local_runner("acme").tail(application.name, 100))
    assert "servedeck download: s3://private-models/tiny/ is complete in" in log
    assert SECRET_ACCESS_KEY not in log


# ---- the download cost: the bucket's region against the cluster's nodes' ----


def private_on_prod(org, s3, region: str, **folder) -> None:
    """A private model in a bucket in `region`, on profile prod, which reads it with keys and
    gives its cluster a storage Secret."""
    s3.folder("private-models", "tiny/", tiny_files()[0], region=region, **folder)
    Profile.objects.filter(organization=org, name="prod").update(
        storage_credentials_ref="env/ACME_S3", storage_secret="kserve-s3"
    )


def region_warnings(run) -> list[str]:
    return [p.message for p in run.warnings if "topology.kubernetes.io/region" in p.message]


def test_a_bucket_in_another_region_than_the_nodes_is_warned_naming_both(
    org, prod, s3, kube, keys_on_the_host
):
    private_on_prod(org, s3, "eu-west-1")
    for name in ("gpu-a", "gpu-b"):
        kube.put(node(name, "us-east-2"))
    run = dry_run(manifest("prod"), org)
    assert run.ok, [str(p) for p in run.refusals]
    [said] = region_warnings(run)
    assert "s3://private-models/tiny is in region eu-west-1" in said
    assert "cluster prod's nodes are in us-east-2" in said
    assert "per GB" in said and "bucket in us-east-2" in said
    [problem] = [p for p in run.warnings if p.message == said]
    assert (problem.path, problem.level) == ("spec.source.model.uri", "warning")
    # One list of nodes, of one page at most; the bucket's location asked with the keys.
    lists = [r for r in kube.requests if r.path == "/api/v1/nodes"]
    assert len(lists) == 1 and lists[0].query.get("limit") == "100", lists
    located = [r for r in s3.requests() if r.query.startswith("location")]
    assert located and located[0].signed, s3.requests()


def test_a_bucket_in_the_nodes_region_is_not_warned(org, prod, s3, kube, keys_on_the_host):
    private_on_prod(org, s3, "us-east-2")
    kube.put(node("gpu-a", "us-east-2"))
    run = dry_run(manifest("prod"), org)
    assert run.ok, [str(p) for p in run.refusals]
    assert region_warnings(run) == []


def test_without_the_nodes_region_nothing_is_said_and_the_bucket_is_not_asked(
    org, prod, s3, kube, keys_on_the_host
):
    private_on_prod(org, s3, "eu-west-1")
    kube.put(node("gpu-a", None))  # no topology labels (a cluster on bare metal)
    run = dry_run(manifest("prod"), org)
    assert run.ok and region_warnings(run) == []
    assert not [r for r in s3.requests() if r.query.startswith("location")]


def test_nodes_the_console_may_not_list_are_no_warning_and_no_error(
    org, prod, s3, kube, keys_on_the_host
):
    private_on_prod(org, s3, "eu-west-1")
    kube.put(node("gpu-a", "us-east-2"))
    kube.fail_next(403, verb="list", resource="nodes")
    run = dry_run(manifest("prod"), org)
    assert run.ok, [str(p) for p in run.refusals]
    assert region_warnings(run) == []


def test_the_wizards_steps_do_not_ask_the_regions(org, prod, s3, kube, keys_on_the_host):
    private_on_prod(org, s3, "eu-west-1")
    kube.put(node("gpu-a", "us-east-2"))
    run = dry_run(manifest("prod"), org, server_side=False)
    assert run.ok and region_warnings(run) == []
    assert not [r for r in kube.requests if r.path == "/api/v1/nodes"]


# ---- gs:// (the GCS emulator: it checks no credentials, so every bucket reads as public) ----


def test_a_gs_model_is_checked_on_a_kubernetes_profile_and_its_region_compared(
    org, prod, gcs, kube
):
    gcs.folder("gcs-models", "tiny/", tiny_files()[0], location="EUROPE-WEST4")
    kube.put(node("gpu-a", "us-east1"))
    run = dry_run(manifest("prod", "gs://gcs-models/tiny"), org)
    assert run.ok, [str(p) for p in run.refusals]
    assert run.check.can_serve and run.check.parameters
    [said] = region_warnings(run)
    assert "gs://gcs-models/tiny is in region europe-west4" in said
    assert "nodes are in us-east1" in said

    gcs.folder("near-models", "tiny/", tiny_files()[0], location="US-EAST1")
    assert region_warnings(dry_run(manifest("prod", "gs://near-models/tiny"), org)) == []
    gcs.folder("multi-models", "tiny/", tiny_files()[0], location="US")
    assert region_warnings(dry_run(manifest("prod", "gs://multi-models/tiny"), org)) == []


def test_the_local_profile_passes_a_gs_folder_it_downloads(
    org, gcs, cpu_machine, settings, tmp_path
):
    from tests.fakes.cpu_runtime import install_fake

    install_fake(cpu_machine[0])
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    gcs.folder("gcs-models", "tiny/", tiny_files()[0])
    text = manifest("local", "gs://gcs-models/tiny").replace(
        "format: vLLM", "format: vLLM\n      resources: {cpu: '1', memory: 2Gi}"
    )
    run = dry_run(text, org)
    assert run.ok, [str(p) for p in run.refusals]


# ---- Azure Blob (Azurite: a private container is refused to anonymous reads) ----


def test_a_private_azure_container_is_checked_with_the_account_key_and_needs_the_clusters_access(
    org, prod, azure, monkeypatch
):
    from tests.fakes.azure import ACCOUNT, ACCOUNT_KEY

    monkeypatch.setenv("ACME_AZ_ACCESS_KEY_ID", ACCOUNT)
    monkeypatch.setenv("ACME_AZ_SECRET_ACCESS_KEY", ACCOUNT_KEY)
    org.token_variables = ["ACME_AZ_ACCESS_KEY_ID", "ACME_AZ_SECRET_ACCESS_KEY"]
    org.save()
    azure.folder("private", "tiny/", tiny_files()[0])
    uri = azure.uri("private", "tiny")
    refused = dry_run(manifest("prod", uri), org, server_side=False)
    assert "storageCredentials" in at(refused, "spec.source.model.uri")[0]

    Profile.objects.filter(organization=org, name="prod").update(
        storage_credentials_ref="env/ACME_AZ"
    )
    run = dry_run(manifest("prod", uri), org, server_side=False)
    assert run.check.can_serve, run.check.verdict
    [refusal] = at(run, "spec.profileName")
    assert "the artifact is private" in refusal and "storageServiceAccount" in refusal
    Profile.objects.filter(organization=org, name="prod").update(
        storage_service_account="blob-reader"
    )
    assert dry_run(manifest("prod", uri), org, server_side=False).ok
