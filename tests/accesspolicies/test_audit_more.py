"""Issue 21, finding 13: what the audit log did not hold. Logins and failed logins (in every
organisation of the account), and changes to clusters and profiles (a kubeconfig, a token
reference, prices), from the pages and the command line. The log says which settings changed,
never a value: no kubeconfig path or contents, no token reference, no password.
(Password links: tests/accesspolicies/test_password_links_at_use.py.)"""

import json

import pytest
import yaml
from django.urls import reverse

from accesspolicies.models import AuditEntry, Membership, Role
from jobs.models import Cluster, Profile
from tests.accesspolicies.conftest import run

CATALOG = [{"name": "l4", "gpuMemory": "23034Mi", "gpusPerNode": 8}]


def login(client, username, password, address="198.51.100.7"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def everything_logged() -> str:
    return json.dumps(
        [
            [e.action, e.object_name, e.actor_name, e.detail]
            for e in AuditEntry.objects.order_by("id")
        ]
    )


@pytest.fixture
def dan_in_two(deployer, other_org):
    """dan, a deployer of acme and a viewer of globex, with a password of his own."""
    deployer.user.set_password("pw-dan-both")
    deployer.user.save()
    Membership.objects.create(organization=other_org, user=deployer.user, role=Role.VIEWER)
    return deployer


# --- logins ----------------------------------------------------------------------------------


def test_a_login_is_in_the_log_of_every_organisation_of_the_account(client, dan_in_two):
    assert login(client, "dan", "pw-dan-both").status_code == 302
    entries = AuditEntry.objects.filter(action="member.login")
    assert {e.organization.slug for e in entries} == {"acme", "globex"}
    for entry in entries:
        assert (entry.actor, entry.object_name) == (dan_in_two.user, "dan")
        assert (entry.address, entry.detail["via"]) == ("198.51.100.7", "web")


def test_a_failed_login_is_in_the_log_without_the_password(client, dan_in_two):
    assert login(client, "dan", "wrong-horse-battery").status_code == 200
    entries = AuditEntry.objects.filter(action="member.login-failed")
    assert {e.organization.slug for e in entries} == {"acme", "globex"}
    for entry in entries:
        assert entry.actor is None and entry.actor_name.startswith("anonymous")
        assert (entry.object_name, entry.address) == ("dan", "198.51.100.7")
    assert "wrong-horse-battery" not in everything_logged()
    assert not AuditEntry.objects.filter(action="member.login").exists()


def test_a_failed_login_of_no_account_writes_no_entry(client, org):
    assert login(client, "my-password-typed-here", "x").status_code == 200
    assert not AuditEntry.objects.exists()


def test_the_admin_reads_them_on_the_audit_page(client, dan_in_two, as_admin):
    login(client, "dan", "wrong-horse-battery")
    login(client, "dan", "pw-dan-both")
    page = as_admin.get(reverse("accesspolicies:audit") + "?action=member.login-failed")
    text = page.content.decode()
    assert page.status_code == 200 and "member.login-failed" in text and "198.51.100.7" in text


# --- clusters and profiles ------------------------------------------------------------------


@pytest.fixture
def kubeconfigs(settings, tmp_path):
    settings.SERVEDECK_KUBECONFIG_DIR = tmp_path
    for name in ("prod", "prod-rotated"):
        (tmp_path / f"{name}.yaml").write_text(
            f"apiVersion: v1\nkind: Config\n# CONTENTS-OF-{name.upper()}\n"
        )
    return tmp_path


def cluster_form(kubeconfigs, kubeconfig="prod.yaml", **more) -> dict:
    return {
        "name": "prod",
        "backend": "kubernetes",
        "kubeconfig_path": str(kubeconfigs / kubeconfig),
        "context": "prod",
        "addons": ["kserve"],
        "queues": "",
        "cache_node_groups": "",
        **more,
    }


def profile_form(cluster, catalog=CATALOG, token="", **more) -> dict:
    return {
        "name": "prod-inference",
        "cluster": cluster.pk,
        "namespace": "models",
        "hf_token_ref": token,
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": yaml.safe_dump(catalog),
        "defaults_yaml": "",
        "extra_namespaces_text": "",
        **more,
    }


def test_a_cluster_added_then_given_another_kubeconfig(as_admin, org, kubeconfigs):
    added = as_admin.post(reverse("jobs:cluster-add"), cluster_form(kubeconfigs))
    assert added.status_code == 302, added.content.decode()
    created = AuditEntry.objects.get(action="cluster.create")
    assert (created.organization, created.actor_name, created.object_name) == (org, "ada", "prod")
    assert "kubeconfig" in created.detail["changed"]

    edit = reverse("jobs:cluster-edit", args=["prod"])
    assert as_admin.post(edit, cluster_form(kubeconfigs, "prod-rotated.yaml")).status_code == 302
    updated = AuditEntry.objects.get(action="cluster.update")
    assert updated.detail["changed"] == ["kubeconfig"]
    # Saved again unchanged: nothing more to say.
    as_admin.post(edit, cluster_form(kubeconfigs, "prod-rotated.yaml"))
    assert AuditEntry.objects.filter(action="cluster.update").count() == 1
    logged = everything_logged()
    assert str(kubeconfigs) not in logged and "CONTENTS-OF" not in logged


def test_a_profiles_token_reference_and_prices_are_said_to_change(as_admin, org, kubeconfigs):
    as_admin.post(reverse("jobs:cluster-add"), cluster_form(kubeconfigs))
    cluster = Cluster.objects.get(name="prod")
    added = as_admin.post(reverse("jobs:profile-add"), profile_form(cluster))
    assert added.status_code == 302, added.content.decode()
    assert AuditEntry.objects.filter(action="profile.create", object_name="prod-inference")

    edit = reverse("jobs:profile-edit", args=["prod-inference"])
    priced = [{**CATALOG[0], "hourlyPrice": 0.8}]
    assert as_admin.post(edit, profile_form(cluster, priced)).status_code == 302
    token = profile_form(cluster, priced, token="secret/hf-token-of-acme")
    assert as_admin.post(edit, token).status_code == 302
    changes = [
        e.detail["changed"]
        for e in AuditEntry.objects.filter(action="profile.update").order_by("id")
    ]
    assert changes == [["prices"], ["hfToken"]]
    assert Profile.objects.get(name="prod-inference").hf_token_ref == "secret/hf-token-of-acme"
    logged = everything_logged()
    assert "hf-token-of-acme" not in logged and "0.8" not in logged


def test_the_command_line_is_audited_too(admin, org, kubeconfigs):
    run("cluster", "add", "edge", "--kubeconfig", str(kubeconfigs / "prod.yaml"))
    run("profile", "add", "edge-models", "--cluster", "edge", "--vllm-version", "0.13.0")
    run("profile", "edit", "edge-models", "--hf-token", "secret/edge-token")
    entries = AuditEntry.objects.order_by("id")
    assert [(e.action, e.object_name) for e in entries] == [
        ("cluster.create", "edge"),
        ("profile.create", "edge-models"),
        ("profile.update", "edge-models"),
    ]
    assert {e.actor_name for e in entries} == {"ada (cli)"}
    assert {e.detail["via"] for e in entries} == {"cli"}
    assert entries.last().detail["changed"] == ["hfToken"]
    assert "edge-token" not in everything_logged()
