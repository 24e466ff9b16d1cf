"""A new profile's vLLM version: read from the cluster's vLLM serving runtime image where the
cluster answers, else the newest version the architectures data file knows; shown on the
profile (the clusters page, the profile form, the command's answer)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from jobs.forms import ProfileForm
from jobs.machine_catalog import VLLM_DATA_FILE, newest_known_vllm_version, vllm_version_of_image
from jobs.models import Cluster, Profile
from tests.fakes.kube_objects import PROD_NAMESPACE


def newest_in_the_data_file() -> str:
    versions = json.loads(VLLM_DATA_FILE.read_text())["versions"]
    return max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))


def runtime(kind: str, name: str, image: str, formats=("huggingface",), namespace=None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "supportedModelFormats": [{"name": f, "autoSelect": True} for f in formats],
            "containers": [{"name": "kserve-container", "image": image}],
        },
    }


def form_data(cluster, vllm_version="") -> dict:
    return {
        "name": "fresh",
        "cluster": cluster.pk,
        "namespace": PROD_NAMESPACE,
        "hf_token_ref": "",
        "vllm_version": vllm_version,
        "machine_catalog_yaml": "[]",
        "defaults_yaml": "",
        "extra_namespaces_text": "",
    }


@pytest.mark.parametrize(
    "image, version",
    [
        ("vllm/vllm-openai:v0.11.2", "0.11.2"),
        ("registry.local:5000/vllm/vllm-openai:0.10.1-cu128", "0.10.1"),
        ("kserve/huggingfaceserver:v0.15.2-vllm0.11.0", "0.11.0"),
        ("kserve/huggingfaceserver:v0.15.2", None),  # KServe's own version, not vLLM's
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai@sha256:abcd", None),
        ("registry.local:5000/vllm-openai", None),
    ],
)
def test_the_vllm_version_an_image_names(image, version):
    assert vllm_version_of_image(image) == version


def test_a_new_profile_defaults_to_the_newest_version_known(org):
    cluster = Cluster.objects.create(organization=org, name="box")
    profile = Profile.objects.create(organization=org, name="p", cluster=cluster)
    assert profile.vllm_version == newest_in_the_data_file() == newest_known_vllm_version()
    assert profile.vllm_version != "0.13.0"


def test_an_empty_version_on_a_local_cluster_is_the_newest_known(org):
    cluster = Cluster.objects.create(organization=org, name="box")
    form = ProfileForm(form_data(cluster), organization=org)
    assert form.is_valid(), form.errors
    assert form.save().vllm_version == newest_in_the_data_file()


def test_the_version_is_read_from_the_clusters_serving_runtime(prod, org, kube, as_admin):
    kube.put(runtime("ClusterServingRuntime", "kserve-sklearnserver", "kserve/sklearn:v0.9"))
    kube.put(runtime("ClusterServingRuntime", "kserve-vllm", "vllm/vllm-openai:v0.11.2"))
    form = ProfileForm(form_data(prod), organization=org)
    assert form.is_valid(), form.errors
    assert form.save().vllm_version == "0.11.2"
    assert "0.11.2" in as_admin.get(reverse("jobs:clusters")).content.decode()


def test_the_namespaces_runtime_comes_before_the_clusters(prod, kube, admin):
    kube.put(runtime("ClusterServingRuntime", "kserve-vllm", "vllm/vllm-openai:v0.11.2"))
    kube.put(
        runtime("ServingRuntime", "own-vllm", "vllm/vllm-openai:v0.12.0", ("vLLM",), PROD_NAMESPACE)
    )
    out = StringIO()
    call_command("profile", "add", "fresh", "--cluster", "prod", "--namespace", PROD_NAMESPACE,
                 stdout=out)  # fmt: skip
    assert "vLLM 0.12.0" in out.getvalue()
    assert Profile.objects.get(name="fresh").vllm_version == "0.12.0"


def test_a_cluster_that_does_not_answer_gives_the_newest_known(prod, org, kube):
    kube.put(runtime("ClusterServingRuntime", "kserve-vllm", "vllm/vllm-openai:v0.11.2"))
    with kube.down():
        form = ProfileForm(form_data(prod), organization=org)
        assert form.is_valid(), form.errors
    assert form.save().vllm_version == newest_in_the_data_file()


def test_a_version_given_is_kept(prod, org, kube):
    kube.put(runtime("ClusterServingRuntime", "kserve-vllm", "vllm/vllm-openai:v0.11.2"))
    form = ProfileForm(form_data(prod, "0.9.1"), organization=org)
    assert form.is_valid(), form.errors
    assert form.save().vllm_version == "0.9.1"
