"""A profile's access to private artifacts, by reference only: the cluster's objects KServe
reads them with (names checked, refused on a local profile), and what the console reads them
with (env/<PREFIX> of variables the operator allowed, or this machine's chain where the
operator named the organisation); on the form, the command line and in the audit log."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accesspolicies.models import AuditEntry
from jobs.forms import ProfileForm
from jobs.models import Cluster, Profile
from jobs.storage_access import (
    ANONYMOUS,
    ClusterAccess,
    cluster_access_refusal,
    credentials,
    credentials_problem,
    object_name_problem,
)
from tests.helpers import make_member

ALLOWED = ["ACME_S3_ACCESS_KEY_ID", "ACME_S3_SECRET_ACCESS_KEY"]
HOST = {"ACME_S3_ACCESS_KEY_ID": "AKIDACME", "ACME_S3_SECRET_ACCESS_KEY": "s3cr3t-acme"}


@pytest.mark.parametrize(
    "ref, allowed, machine, problem",
    [
        ("", [], [], None),
        ("env/ACME_S3", ALLOWED, [], None),
        ("env/ACME_S3", ALLOWED[:1], [], "ACME_S3_SECRET_ACCESS_KEY, which the operator"),
        ("env/ACME_S3", [], [], "allow-token-variable acme ACME_S3_ACCESS_KEY_ID"),
        ("env/SERVEDECK", ["SERVEDECK_ACCESS_KEY_ID", "SERVEDECK_SECRET_ACCESS_KEY"], [], "not"),
        ("machine", [], ["acme"], None),
        ("machine", [], ["*"], None),
        ("machine", [], ["globex"], "add acme to SERVEDECK_MACHINE_CREDENTIALS"),
        ("AKIAIOSFODNN7EXAMPLE", [], [], "Never paste a key"),
        ("env/" + "A" * 5000, [], [], "is not a credentials reference"),
    ],
)
def test_the_credentials_rule(ref, allowed, machine, problem):
    found = credentials_problem(ref, allowed, "acme", machine)
    if problem is None:
        assert found is None
    else:
        assert problem in found
        assert "storageCredentials" in found
        assert len(found) < 600  # a long reference is cut, never repeated whole


def test_credentials_are_read_only_while_allowed_and_never_shown():
    read = credentials("env/ACME_S3", ALLOWED, HOST, "acme", [])
    assert (read.kind, read.access_key_id, read.secret_access_key) == ("keys", *HOST.values())
    assert "s3cr3t" not in repr(read) and "AKIDACME" not in repr(read)
    assert credentials("env/ACME_S3", [], HOST, "acme", []) is None  # taken back
    assert credentials("env/ACME_S3", ALLOWED, {}, "acme", []) is None  # not set on the host
    assert credentials("", [], HOST, "acme", []) is ANONYMOUS
    assert credentials("machine", [], HOST, "acme", []) is None
    assert credentials("machine", [], HOST, "acme", ["acme"]).kind == "machine"
    # A session token is read only when the operator allowed its variable too.
    host = {**HOST, "ACME_S3_SESSION_TOKEN": "tok"}
    assert credentials("env/ACME_S3", ALLOWED, host, "acme", []).session_token == ""
    allowed = [*ALLOWED, "ACME_S3_SESSION_TOKEN"]
    assert credentials("env/ACME_S3", allowed, host, "acme", []).session_token == "tok"


@pytest.mark.parametrize(
    "value, ok",
    [("", True), ("s3-reader", True), ("kserve.storage", True), ("S3Reader", False),
     ("a/b", False), ("x" * 254, False), ("-x", False)],
)  # fmt: skip
def test_object_names(value, ok):
    assert (object_name_problem(value, "storageSecret") is None) == ok


def test_the_cluster_needs_something_to_read_a_private_bucket_with():
    refusal = cluster_access_refusal("s3", ClusterAccess(), "prod")
    assert "storageServiceAccount" in refusal and "storageSecret" in refusal
    assert cluster_access_refusal("s3", ClusterAccess(storage_secret="s3"), "prod") is None
    assert cluster_access_refusal("gs", ClusterAccess(service_account="sa"), "prod") is None
    assert cluster_access_refusal("hf", ClusterAccess(), "prod") is None


# ---- saving a profile -------------------------------------------------------------------------


@pytest.fixture
def kube(org):
    cluster = Cluster.objects.create(
        organization=org, name="gpu", backend="kubernetes", kubeconfig_path="/nonexistent"
    )
    return Profile.objects.create(organization=org, name="prod", cluster=cluster, namespace="ml")


def form_for(profile: Profile, **changes) -> ProfileForm:
    data = {
        "name": profile.name,
        "cluster": profile.cluster.pk,
        "namespace": profile.namespace,
        "hf_token_ref": "",
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "[]",
        "defaults_yaml": "",
        **changes,
    }
    return ProfileForm(data, instance=profile, organization=profile.organization)


def test_a_kubernetes_profile_names_its_clusters_objects(kube):
    form = form_for(
        kube,
        storage_service_account="s3-reader",
        storage_secret="kserve-s3",
        image_pull_secret="registry-pull",
    )
    assert form.is_valid(), form.errors
    form.save()
    kube.refresh_from_db()
    names = (kube.storage_service_account, kube.storage_secret, kube.image_pull_secret)
    assert names == ("s3-reader", "kserve-s3", "registry-pull")


def test_a_secret_is_named_never_pasted(kube):
    form = form_for(kube, storage_secret="AKIAIOSFODNN7EXAMPLE/wJalrXUtnFEMI")
    assert not form.is_valid()
    message = form.errors["storage_secret"][0]
    assert "storageSecret" in message and "not a Kubernetes object name" in message


def test_a_local_profile_takes_no_cluster_objects(org):
    local = Profile.objects.get(organization=org, name="local")
    form = form_for(local, storage_service_account="s3-reader", image_pull_secret="pull")
    assert not form.is_valid()
    assert "storageServiceAccount: a local profile runs on this machine" in str(form.errors)
    assert "imagePullSecret" in str(form.errors["image_pull_secret"])


def test_storage_credentials_follow_the_operators_allowance(org, other_org, settings):
    org.token_variables = ALLOWED
    org.save()
    local = Profile.objects.get(organization=org, name="local")
    assert form_for(local, storage_credentials_ref="env/ACME_S3").is_valid()
    theirs = Profile.objects.get(organization=other_org, name="local")
    refused = form_for(theirs, storage_credentials_ref="env/ACME_S3")
    assert not refused.is_valid()
    assert "allow-token-variable globex" in refused.errors["storage_credentials_ref"][0]
    settings.SERVEDECK_MACHINE_CREDENTIALS = ["acme"]
    assert form_for(local, storage_credentials_ref="machine").is_valid()
    assert not form_for(theirs, storage_credentials_ref="machine").is_valid()


# ---- the command line and the audit log ------------------------------------------------------


def profile_cli(*args: str) -> str:
    out = StringIO()
    call_command("profile", *args, "--org", "acme", "--user", "ada", stdout=out)
    return out.getvalue()


def test_the_command_line_sets_and_removes_storage_access(kube, org, django_user_model):
    make_member(django_user_model, org, "ada", "admin")
    profile_cli(
        "edit", "prod", "--storage-service-account", "s3-reader", "--image-pull-secret", "p"
    )
    kube.refresh_from_db()
    assert (kube.storage_service_account, kube.image_pull_secret) == ("s3-reader", "p")
    profile_cli("edit", "prod", "--storage-service-account", "")
    kube.refresh_from_db()
    assert (kube.storage_service_account, kube.image_pull_secret) == ("", "p")
    with pytest.raises(CommandError, match="storageCredentials: env/NOPE reads"):
        profile_cli("edit", "prod", "--storage-credentials", "env/NOPE")
    event = AuditEntry.objects.filter(organization=org, object_name="prod").latest("id")
    assert "storageServiceAccount" in str(event.detail)
    assert "s3-reader" not in str(event.detail)  # which setting changed, never its value
