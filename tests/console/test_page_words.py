"""The words and layout a newcomer meets on the console's pages: no literal backticks, table
headers and labels that say what they are, the header in plain words, a plain 404, the
favicon, Deploy from YAML's example and empty manifest, the cluster form's Kubernetes fields,
the Team area (Access is the wizard's step), and a redirect after every POST that makes a
secret."""

import re

import pytest
from django.urls import reverse

from accesspolicies.models import PersonalAccessToken
from jobs.models import Cluster
from tests.helpers import SHORTEST


def html(client, url: str, **query) -> str:
    response = client.get(url, query)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def main(page: str) -> str:
    return page.split("<main", 1)[1]


def shown_text(page: str) -> str:
    """What the page says, without tags and attributes (backticks in attributes are no text)."""
    return re.sub(r"<[^>]+>", " ", page)


# ---- backticks ----


def test_the_empty_dashboard_shows_code_not_backticks(as_admin):
    page = html(as_admin, reverse("console:home"))
    assert "No models yet" in page
    assert "<code>manage.py app apply</code>" in page
    assert "`" not in shown_text(main(page))


@pytest.mark.parametrize(
    "url",
    ["jobs:cluster-add", "jobs:profile-add", "models_catalog:master-add", "accesspolicies:keys"],
)
def test_hints_and_empty_tables_show_code_not_backticks(as_admin, url):
    page = html(as_admin, reverse(url))
    assert "`" not in shown_text(main(page))


def test_a_form_error_with_a_command_shows_it_as_code(as_admin, org):
    cluster = Cluster.objects.get(organization=org, name="local")
    form = {
        "name": "p2",
        "cluster": cluster.pk,
        "namespace": "default",
        "hf_token_ref": "env/HF_TOKEN_ACME",  # not allowed by the operator
        "vllm_version": "0.13.0",
        "machine_catalog_yaml": "",
        "defaults_yaml": "",
    }
    response = as_admin.post(reverse("jobs:profile-add"), form)
    assert response.status_code == 200
    page = response.content.decode()
    assert "<code>manage.py organization allow-token-variable acme HF_TOKEN_ACME</code>" in page
    assert "`" not in shown_text(main(page))


# ---- labels and headers ----


def test_the_profiles_table_names_its_columns(as_admin):
    page = html(as_admin, reverse("jobs:clusters"))
    profiles = page[page.index('id="profiles"') :]
    found = re.findall(r"<th[^>]*>\s*(?:<a[^>]*>)?\s*([^<]+?)\s*<", profiles)
    headers = [header for header in found if header.strip()]
    assert headers[:3] == ["Name", "Cluster", "Namespace"], headers
    assert len(set(headers)) == len(headers)


def test_the_profile_form_says_vllm(as_admin):
    page = html(as_admin, reverse("jobs:profile-add"))
    assert ">vLLM version</label>" in page
    assert "VLLM" not in page


def test_the_header_names_the_organisation_then_who_is_signed_in(as_admin):
    page = html(as_admin, reverse("console:home"))
    who = re.search(r'<div class="who">(.*?)</div>', page, re.S).group(1)
    words = " ".join(re.sub(r"<[^>]+>", "", who).split())
    assert words.startswith("Acme Signed in as ada, role admin"), words


def test_a_viewer_reads_their_role_in_words(as_viewer):
    page = html(as_viewer, reverse("console:home"))
    assert 'Signed in as <a class="user"' in page
    assert ', role <span class="role">viewer</span>' in page


# ---- 404 and the favicon ----


@pytest.mark.parametrize("path", ["/nope/", "/models/missing/", "/catalog/masters/none/"])
def test_the_404_page_is_plain_words_and_a_way_home(as_viewer, path):
    response = as_viewer.get(path)
    assert response.status_code == 404
    body = main(response.content.decode())
    assert "<h1>Page not found</h1>" in body
    assert '<a href="/">Back to Models</a>' in body
    assert "Resolver404" not in body and "Http404" not in body


def test_the_favicon_is_found_without_logging_in(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/static/console/favicon.svg")
    assert client.get(response["Location"]).status_code == 200


# ---- Deploy from YAML ----


def test_deploy_from_yaml_offers_an_example_not_a_placeholder_that_looks_like_one(as_deployer):
    page = html(as_deployer, reverse("jobs:deploy-yaml"))
    placeholder = re.search(r'<textarea id="manifest"[^>]*placeholder="([^"]*)"', page).group(1)
    assert "apiVersion" not in placeholder and "Paste" in placeholder
    example = re.search(r'<pre class="code" id="manifest-example">(.*?)</pre>', page, re.S)
    assert example and "profileName: local" in example.group(1)
    assert 'data-fill-from="#manifest-example" data-fill-into="#manifest"' in page


def test_the_example_deploys(as_deployer):
    page = html(as_deployer, reverse("jobs:deploy-yaml"))
    example = re.search(r'id="manifest-example">(.*?)</pre>', page, re.S).group(1)
    assert example.strip() == SHORTEST.strip()
    run = as_deployer.post(
        reverse("jobs:deploy-yaml-dry-run"), {"manifest": example}, HTTP_HX_REQUEST="true"
    )
    assert "Dry run passed" in run.content.decode()


@pytest.mark.parametrize(
    "url, htmx",
    [
        ("jobs:deploy-yaml-dry-run", True),
        ("jobs:deploy-yaml-dry-run", False),
        ("jobs:deploy-yaml-apply", False),  # Deploy is a plain form post, never htmx
    ],
)
def test_an_empty_manifest_says_paste_one_first_naming_the_field(as_deployer, url, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = as_deployer.post(reverse(url), {"manifest": "  \n"}, **headers)
    assert response.status_code == (200 if htmx else 400)  # htmx swaps 2xx answers only
    text = response.content.decode()
    assert "Manifest (YAML or JSON) is empty" in text and "Paste a manifest first" in text
    assert "document is empty" not in text


# ---- the cluster form ----


def test_kubernetes_fields_are_marked_to_show_for_kubernetes_only(as_admin):
    page = html(as_admin, reverse("jobs:cluster-add"))
    wrappers = re.findall(
        r'<div class="field" data-shown-when="backend:kubernetes">(.*?)</div>', page, re.S
    )
    inputs = {name for part in wrappers for name in re.findall(r'name="(\w+)"', part)}
    assert inputs == {
        "kubeconfig_path",
        "context",
        "in_cluster",
        "addons",
        "queues",
        "cache_node_groups",
    }
    assert 'name="backend"' in page and 'name="name"' in page  # shown for both


def test_the_add_ons_label_is_the_legend_above_its_checkboxes(as_admin):
    page = html(as_admin, reverse("jobs:cluster-add"))
    group = re.search(r"<fieldset><legend>Add-ons</legend>(.*?)</fieldset>", page, re.S)
    assert group, "no Add-ons fieldset"
    assert 'type="checkbox" name="addons"' in group.group(1)
    assert "Add-ons</label>" not in page


def test_a_local_cluster_ignores_the_kubernetes_fields_it_was_posted(as_admin, org):
    form = {
        "name": "c2",
        "backend": "local",
        "kubeconfig_path": "/x",
        "context": "prod",
        "addons": ["kueue"],
        "queues": "a, b",
        "cache_node_groups": "[" * 50,  # never read
    }
    response = as_admin.post(reverse("jobs:cluster-add"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = Cluster.objects.get(organization=org, name="c2")
    assert (saved.kubeconfig_path, saved.context, saved.in_cluster) == ("", "", False)
    assert (saved.addons, saved.queues, saved.cache_node_groups) == ([], [], {})


def test_a_kubernetes_cluster_reads_them(as_admin):
    form = {"name": "c2", "backend": "kubernetes", "cache_node_groups": "g: lots", "queues": ""}
    response = as_admin.post(reverse("jobs:cluster-add"), form)
    assert response.status_code == 200
    assert "Node group g" in response.content.decode()


# ---- Team, and Access for the wizard's step ----


@pytest.mark.parametrize(
    "url", ["accesspolicies:members", "accesspolicies:tokens", "accesspolicies:keys"]
)
def test_the_members_and_keys_area_is_team(as_admin, url):
    page = html(as_admin, reverse(url))
    assert "<h1>Team</h1>" in page
    nav = re.search(r'<nav class="nav" aria-label="Main">(.*?)</nav>', page, re.S).group(1)
    assert 'aria-current="page">Team</a>' in nav and ">Access</a>" not in nav


def test_the_wizard_keeps_access_for_its_step(as_deployer):
    page = html(as_deployer, reverse("jobs:wizard"))
    assert ">Access<" in page  # the stepper's step
    assert ">Team</a>" in page  # the nav's area


# ---- redirect after every POST that makes a secret ----


def test_creating_a_token_redirects_and_a_reload_makes_no_second(as_deployer, deployer):
    create = reverse("accesspolicies:token-create")
    response = as_deployer.post(create, {"name": "ci", "expires_in_days": 30})
    assert response.status_code == 302
    page = html(as_deployer, response["Location"])
    assert "shown once" in page
    reload = html(as_deployer, response["Location"])  # a reload is a GET now
    assert "shown once" not in reload
    assert PersonalAccessToken.objects.filter(user=deployer.user).count() == 1


def test_revoking_a_token_asks_first(as_deployer, deployer):
    PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    page = html(as_deployer, reverse("accesspolicies:tokens"))
    assert 'data-confirm="Revoke token ci? Calls with it are refused from then on."' in page
