"""The audit log: every change to applications (and keys, policies, domains, members: their
own tests) is recorded with who, when and from where; admins read and filter it."""

import pytest
from django.urls import reverse

from accesspolicies import audit, keys
from accesspolicies.models import AuditEntry
from jobs import deploy as verbs
from tests.accesspolicies.conftest import run
from tests.helpers import SHORTEST, bearer, problems

MANUAL = SHORTEST + "  syncType: Manual\n"


def test_every_application_verb_writes_one_entry(deployer):
    first = verbs.apply(MANUAL, deployer)
    application = first.application
    more_memory = "      uri: hf://BAAI/bge-m3\n      resources:\n        memory: 6Gi\n"
    verbs.apply(MANUAL.replace("      uri: hf://BAAI/bge-m3\n", more_memory), deployer)
    verbs.deploy_latest(application, deployer)
    verbs.rollback(application, 1, deployer)
    for verb in ("stop", "start", "restart"):
        getattr(verbs, verb)(application, deployer)
    verbs.delete(application, deployer)
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == [
        "application.apply",
        "application.apply",
        "application.deploy",
        "application.rollback",
        "application.stop",
        "application.start",
        "application.restart",
        "application.delete",
    ]
    entries = AuditEntry.objects.all()
    assert {e.object_name for e in entries} == {"bge-embed"}
    assert {e.actor for e in entries} == {deployer.user}
    rollback = AuditEntry.objects.get(action="application.rollback")
    assert rollback.detail["to"] == 1 and rollback.detail["revision"] == 3


def test_applying_the_same_manifest_again_records_nothing(deployer):
    verbs.apply(MANUAL, deployer)
    verbs.apply(MANUAL, deployer)
    assert AuditEntry.objects.count() == 1


def test_the_api_records_the_callers_address(client, deployer):
    response = client.post(
        "/api/v1/applications",
        MANUAL,
        content_type="application/yaml",
        REMOTE_ADDR="192.0.2.7",
        **bearer(deployer),
    )
    assert response.status_code == 201
    entry = AuditEntry.objects.get()
    assert (entry.address, entry.detail["via"], entry.actor_name) == ("192.0.2.7", "api", "dan")


def test_the_command_line_records_cli_and_no_address(admin, tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(MANUAL)
    run("app", "apply", "-f", str(path))
    entry = AuditEntry.objects.get()
    assert entry.actor_name == "ada (cli)" and entry.address is None


def test_record_bounds_what_it_keeps(org, admin):
    entry = audit.record(
        org, admin.user, "apikey.create", "apikey", "n" * 500, {"note": "x" * 5000}, "not-an-ip"
    )
    assert len(entry.object_name) == 200 and len(entry.detail["note"]) <= 201
    assert entry.address is None


def _entries(org, admin):
    keys.create(org, "bot", actor=admin)
    keys.create(org, "other", actor=admin)
    keys.revoke(keys.get_key(admin, "bot"), actor=admin)


def test_the_page_filters_by_action_object_and_actor(as_admin, org, admin):
    _entries(org, admin)
    url = reverse("accesspolicies:audit")
    page = as_admin.get(url).content.decode()
    assert page.count("apikey.create</td>") == 2 and "apikey.revoke</td>" in page
    page = as_admin.get(url, {"action": "apikey.revoke"}).content.decode()
    assert "apikey.revoke</td>" in page and "apikey.create</td>" not in page
    page = as_admin.get(url, {"object": "oth"}).content.decode()
    assert ">other</td>" in page and ">bot</td>" not in page
    page = as_admin.get(url, {"actor": "nobody"}).content.decode()
    assert "Nothing recorded yet." in page


def test_htmx_gets_only_the_table_and_sorting_works(as_admin, org, admin):
    _entries(org, admin)
    url = reverse("accesspolicies:audit")
    fragment = as_admin.get(url, {"sort": "object_name"}, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="audit"') and "<html" not in fragment
    assert fragment.index(">bot</td>") < fragment.index(">other</td>")
    fragment = as_admin.get(url, {"sort": "-object_name"}, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.index(">other</td>") < fragment.index(">bot</td>")
    assert as_admin.get(url, {"page": "999", "sort": "nonsense"}).status_code == 200


def test_only_admins_read_it_and_only_their_organisations(
    org, admin, as_deployer, as_viewer, as_outsider
):
    _entries(org, admin)
    url = reverse("accesspolicies:audit")
    assert as_deployer.get(url).status_code == 403
    assert as_viewer.get(url).status_code == 403
    page = as_outsider.get(url).content.decode()
    assert ">bot</td>" not in page and "Nothing recorded yet." in page


@pytest.mark.parametrize("name", ["keys", "policies", "domains", "audit"])
def test_the_admin_tabs_show_only_to_admins(as_admin, as_deployer, admin, deployer, name):
    url = reverse(f"accesspolicies:{name}")
    assert url in as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert url not in as_deployer.get(reverse("accesspolicies:members")).content.decode()


def test_nul_characters_in_names_and_filters_are_not_found_never_a_crash(
    as_admin, client, org, admin
):
    """PostgreSQL refuses NUL in a query: such names are simply not found."""
    keys.create(org, "bot", actor=admin)
    for url in (
        "/access/keys/b%00t/revoke/",
        "/access/policies/p%00/",
        "/access/domains/x%00.com/verify/",
        "/access/members/a%00/remove/",
        "/access/invitations/%00/withdraw/",
        "/access/tokens/%00/revoke/",
    ):
        method = as_admin.get if url.startswith("/access/policies/") else as_admin.post
        assert method(url).status_code == 404, url
    assert as_admin.get("/access/audit/?object=%00&actor=%00&action=%00").status_code == 200
    assert client.get("/api/v1/keys/b%00t", **bearer(admin)).status_code == 404
    assert as_admin.get("/access/join/sdi_%00/").status_code == 410
    response = client.post(
        "/api/v1/policies",
        {"name": "p", "keys": ["b\x00t"]},
        content_type="application/json",
        **bearer(admin),
    )
    assert response.status_code == 400 and problems(response)[0]["path"] == "keys"
