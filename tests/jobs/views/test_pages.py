"""Console pages of jobs/: each for the roles that may and may not use it."""

import re

import pytest
from django.urls import reverse

from jobs.deploy import apply
from jobs.models import Application, Cluster, Profile
from tests.helpers import SHORTEST


@pytest.fixture
def app(deployer):
    return apply(SHORTEST, deployer).application


PAGES = [
    ("console:home", {}),
    ("jobs:application-detail", {"name": "bge-embed"}),
    ("jobs:deploy-yaml", {}),
    ("jobs:clusters", {}),
    ("jobs:cluster-add", {}),
    ("jobs:cluster-edit", {"name": "local"}),
    ("jobs:profile-add", {}),
    ("jobs:profile-edit", {"name": "local"}),
    ("accesspolicies:tokens", {}),
]

# role -> url name -> expected status
EXPECTED = {
    "admin": dict.fromkeys([name for name, _ in PAGES], 200),
    "deployer": {
        "console:home": 200,
        "jobs:application-detail": 200,
        "jobs:deploy-yaml": 200,
        "accesspolicies:tokens": 200,
        "jobs:clusters": 403,
        "jobs:cluster-add": 403,
        "jobs:cluster-edit": 403,
        "jobs:profile-add": 403,
        "jobs:profile-edit": 403,
    },
    "viewer": {
        "console:home": 200,
        "jobs:application-detail": 200,
        "jobs:deploy-yaml": 403,
        "accesspolicies:tokens": 200,
        "jobs:clusters": 403,
        "jobs:cluster-add": 403,
        "jobs:cluster-edit": 403,
        "jobs:profile-add": 403,
        "jobs:profile-edit": 403,
    },
    # another organisation's admin: its own pages work; acme's objects are not found
    "outsider": {
        "console:home": 200,
        "jobs:application-detail": 404,
        "jobs:deploy-yaml": 200,
        "accesspolicies:tokens": 200,
        "jobs:clusters": 200,
        "jobs:cluster-add": 200,
        "jobs:cluster-edit": 200,
        "jobs:profile-add": 200,
        "jobs:profile-edit": 200,
    },
}


@pytest.mark.parametrize("role", list(EXPECTED))
@pytest.mark.parametrize("url_name, kwargs", PAGES, ids=[name for name, _ in PAGES])
def test_page_access_by_role(request, app, role, url_name, kwargs):
    client = request.getfixturevalue(f"as_{role}")
    response = client.get(reverse(url_name, kwargs=kwargs))
    assert response.status_code == EXPECTED[role][url_name]


@pytest.mark.parametrize("url_name, kwargs", PAGES, ids=[name for name, _ in PAGES])
def test_every_page_needs_login(client, app, url_name, kwargs):
    response = client.get(reverse(url_name, kwargs=kwargs))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_application_page_shows_manifest_history_and_why(as_viewer, app):
    page = as_viewer.get(reverse("jobs:application-detail", args=["bge-embed"])).content.decode()
    assert "profileName: local" in page and "namespace: default" in page
    assert "Deploy history" in page and "Applied" in page
    assert "Roll back" not in page and "Delete" not in page  # a viewer has no buttons


def test_rollback_and_delete_from_the_page(as_deployer, deployer, app):
    apply(SHORTEST + "      resources:\n        memory: 6Gi\n", deployer)
    url = reverse("jobs:application-rollback", args=["bge-embed"])
    response = as_deployer.post(url, {"revision": "1"}, follow=True)
    assert "rolls bge-embed back to revision 1" in response.content.decode()
    assert app.revisions.count() == 3
    response = as_deployer.post(url, {"revision": "3"}, follow=True)
    assert "nothing to roll back" in response.content.decode()
    delete = reverse("jobs:application-delete", args=["bge-embed"])
    as_deployer.post(delete, {"confirm_name": "bge-embed"})
    assert not Application.objects.exists()


@pytest.mark.parametrize(
    "typed, said", [(None, "is empty"), ("", "is empty"), ("bge-embd", "is not bge-embed")]
)
def test_delete_without_the_name_typed_deletes_nothing_and_says_what_to_type(
    as_deployer, app, typed, said
):
    data = {} if typed is None else {"confirm_name": typed}
    response = as_deployer.post(reverse("jobs:application-delete", args=["bge-embed"]), data)
    assert response.status_code == 400
    html = response.content.decode()
    error = re.search(r'<p class="error" id="confirm-name-error">([^<]*)</p>', html).group(1)
    assert error == (
        f"The name typed to confirm (confirm_name) {said}: type bge-embed, exactly, to delete "
        "it. Nothing was deleted."
    )
    assert 'aria-invalid="true" aria-describedby="confirm-name-error"' in html
    assert "bge-embd" not in html  # what was typed is not echoed
    assert Application.objects.filter(name="bge-embed").exists()


def test_the_delete_form_asks_for_the_name_without_javascript(as_deployer, app):
    html = as_deployer.get(reverse("jobs:application-detail", args=["bge-embed"])).content.decode()
    form = re.search(r'<form [^>]*action="/models/bge-embed/delete/".*?</form>', html, re.S)
    assert '<label for="confirm-name">Type <strong>bge-embed</strong> to delete it</label>' in (
        form.group(0)
    )
    assert 'name="confirm_name"' in form.group(0)


def test_viewer_cannot_post_changes(as_viewer, app):
    for name in ("application-rollback", "application-delete", "application-deploy"):
        response = as_viewer.post(reverse(f"jobs:{name}", args=["bge-embed"]), {"revision": "1"})
        assert response.status_code == 403
    assert Application.objects.exists()


def test_deploy_from_yaml_dry_run_fragment_then_deploy(as_deployer, db):
    url = reverse("jobs:deploy-yaml-dry-run")
    fragment = as_deployer.post(url, {"manifest": SHORTEST}, HTTP_HX_REQUEST="true")
    text = fragment.content.decode()
    assert "Dry run passed" in text and "<html" not in text
    assert "memory: 5Gi" in text  # filled: what holds bge-m3 on CPU
    bad = as_deployer.post(
        url, {"manifest": SHORTEST.replace("local", "nope")}, HTTP_HX_REQUEST="true"
    )
    assert "Refused" in bad.content.decode() and "spec.profileName" in bad.content.decode()
    response = as_deployer.post(reverse("jobs:deploy-yaml-apply"), {"manifest": SHORTEST})
    assert response.status_code == 302
    assert response["Location"] == reverse("jobs:application-detail", args=["bge-embed"])


def test_deploy_from_yaml_refused_keeps_the_text(as_deployer, db):
    text = SHORTEST.replace("local", "nope")
    response = as_deployer.post(reverse("jobs:deploy-yaml-apply"), {"manifest": text})
    assert response.status_code == 400
    assert "profileName: nope" in response.content.decode()


def test_admin_adds_a_kubernetes_cluster_and_a_profile(as_admin, org, settings, tmp_path):
    settings.SERVEDECK_KUBECONFIG_DIR = tmp_path
    (tmp_path / "prod.yaml").write_text("apiVersion: v1\nkind: Config\n")
    response = as_admin.post(
        reverse("jobs:cluster-add"),
        {
            "name": "prod",
            "backend": "kubernetes",
            "kubeconfig_path": str(tmp_path / "prod.yaml"),
            "context": "prod",
            "addons": ["kserve", "kueue"],
            "queues": "gpu-queue, cpu-queue",
            "cache_node_groups": "gpu-nodes: 500Gi",
        },
    )
    assert response.status_code == 302, response.content.decode()
    cluster = Cluster.objects.get(name="prod")
    assert cluster.queues == ["gpu-queue", "cpu-queue"]
    assert cluster.cache_node_groups == {"gpu-nodes": 500 * 2**30}
    response = as_admin.post(
        reverse("jobs:profile-add"),
        {
            "name": "prod-inference",
            "cluster": cluster.pk,
            "namespace": "models",
            "hf_token_ref": "secret/hf-token",
            "vllm_version": "0.13.0",
            "machine_catalog_yaml": "- name: l4\n  gpuMemory: 23034Mi\n  gpusPerNode: 8\n",
            "defaults_yaml": "",
        },
    )
    assert response.status_code == 302, response.content.decode()
    profile = Profile.objects.get(name="prod-inference")
    assert profile.machine_catalog == [{"name": "l4", "gpuMemory": "23034Mi", "gpusPerNode": 8}]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"backend": "kubernetes"}, "either from a kubeconfig"),
        ({"backend": "kubernetes", "cache_node_groups": "g: lots"}, "Node group g"),
        ({"backend": "local", "name": "local"}, "exists already"),
    ],
    ids=["k8s-without-way-in", "bad-cache-size", "duplicate"],
)
def test_cluster_form_errors_say_what_to_do(as_admin, org, data, message):
    form = {"name": "c2", "queues": "", "cache_node_groups": "", **data}
    response = as_admin.post(reverse("jobs:cluster-add"), form)
    assert response.status_code == 200
    assert message in response.content.decode()


@pytest.mark.parametrize(
    "catalog, message",
    [
        ("- name: l4\n", "gpuMemory is required"),
        ("- name: l4\n  gpuMemory: lots\n", "l4.gpuMemory"),
        # gpusPerNode 0 is a machine without GPUs now, which has no gpuMemory.
        ("- name: l4\n  gpuMemory: 24Gi\n  gpusPerNode: 0\n", "set on a machine without GPUs"),
        ("- name: l4\n  gpuMemory: 24Gi\n  gpusPerNode: 65\n", "from 0 to 64"),
        ("- name: l4\n  gpuMemory: 24Gi\n  nodes: 0\n", "l4.nodes"),
        ("- name: cpu\n  gpusPerNode: 0\n  nodeMemory: lots\n", "cpu.nodeMemory"),
        ("- name: l4\n  gpuMemory: 24Gi\n  colour: red\n", "unknown keys"),
        ("name: l4\n", "must be a YAML list"),
        ("- [unclosed\n", "not valid YAML"),
    ],
)
def test_machine_catalog_errors_name_the_entry(as_admin, org, catalog, message):
    cluster = Cluster.objects.get(organization=org, name="local")
    response = as_admin.post(
        reverse("jobs:profile-add"),
        {
            "name": "p2",
            "cluster": cluster.pk,
            "namespace": "default",
            "vllm_version": "0.13.0",
            "machine_catalog_yaml": catalog,
            "defaults_yaml": "",
        },
    )
    assert response.status_code == 200
    assert message in response.content.decode()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"kubeconfig_path": "/root/.kube/config"}, "is outside the folder"),
        ({"kubeconfig_path": "KUBEDIR/../secret-key"}, "is outside the folder"),
        ({"kubeconfig_path": "KUBEDIR/x:/root/.kube/config"}, "reads as a list of files"),
        ({"kubeconfig_path": "~/.kube/config"}, "starts with &#x27;~&#x27;"),
        ({"kubeconfig_path": "KUBEDIR/link"}, "is outside the folder"),
        ({"kubeconfig_path": "KUBEDIR/sub"}, "is not a regular file"),
        ({"kubeconfig_path": "KUBEDIR/none.yaml"}, "does not exist"),
        ({"in_cluster": "on"}, "service account is for operators"),
    ],
)
def test_pages_cannot_point_the_console_at_its_own_credentials(
    as_admin, org, settings, tmp_path, data, message
):
    settings.SERVEDECK_KUBECONFIG_DIR = tmp_path / "kubeconfigs"
    (tmp_path / "kubeconfigs" / "sub").mkdir(parents=True)
    (tmp_path / "kubeconfigs" / "x").write_text("apiVersion: v1\nkind: Config\n")
    (tmp_path / "secret-key").write_text("not a kubeconfig")
    (tmp_path / "kubeconfigs" / "link").symlink_to(tmp_path / "secret-key")
    form = {"name": "c3", "backend": "kubernetes", "queues": "", "cache_node_groups": "", **data}
    if "kubeconfig_path" in form:
        form["kubeconfig_path"] = form["kubeconfig_path"].replace(
            "KUBEDIR", str(tmp_path / "kubeconfigs")
        )
    response = as_admin.post(reverse("jobs:cluster-add"), form)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Cluster.objects.filter(name="c3").exists()


def test_profile_form_offers_only_the_orgs_clusters(as_admin, other_org):
    page = as_admin.get(reverse("jobs:profile-add")).content.decode()
    other = Cluster.objects.get(organization=other_org)
    own = Cluster.objects.get(organization__slug="acme")
    assert f'value="{own.pk}"' in page
    assert f'value="{other.pk}"' not in page
