"""The Check model page as a newcomer uses it: `org/name` as the wizard takes it, Deploy this
model with the settings that were checked, and a link to the profile when its Hugging Face
token is what is missing. Against the fake Hub."""

import re
from html import unescape

import pytest
from django.urls import reverse

from jobs.models import Draft
from models_catalog.check_types import SERVABLE

BGE = "BAAI/bge-m3"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # gated on the fake Hub
CHECK = reverse("models_catalog:check")


def page(client, **query) -> str:
    response = client.get(CHECK, query)
    assert response.status_code == 200
    return response.content.decode()


def deploy_form(html: str) -> dict:
    """The hidden inputs of the Deploy this model form, as the browser would send them."""
    form = r'<form method="get" action="([^"]+)" class="[^"]*deploy-checked">(.*?)</form>'
    found = re.search(form, html, re.S)
    assert found, "no Deploy this model form"
    assert found.group(1) == reverse("jobs:wizard")
    inputs = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', found.group(2))
    return {name: unescape(value) for name, value in inputs}


@pytest.mark.parametrize("typed", [BGE, f"hf://{BGE}", f"https://huggingface.co/{BGE}"])
def test_org_name_is_checked_as_the_wizard_takes_it(as_viewer, typed):
    html = page(as_viewer, uri=typed)
    assert SERVABLE in html, html[:3000]
    assert "XLMRobertaModel" in html
    assert 'value="' + typed + '"' in html  # the field keeps what was typed


def test_deploy_this_model_carries_the_checked_settings(as_deployer):
    html = page(as_deployer, uri=BGE, profile="local", context="4096")
    assert "Deploy this model" in html
    assert deploy_form(html) == {"uri": f"hf://{BGE}", "profile": "local", "context": "4096"}


def test_deploy_this_model_prefills_the_wizard_and_the_draft_gets_the_context(as_deployer):
    query = deploy_form(page(as_deployer, uri=BGE, context="4096"))
    step = as_deployer.get(reverse("jobs:wizard"), query).content.decode()
    assert 'name="repo" value="BAAI/bge-m3"' in step
    assert '<input type="hidden" name="context" value="4096">' in step
    form = {
        "name": "bge",
        "profile": "local",
        "source": "hub",
        "repo": BGE,
        "revision": "",
        "format": "",
        "context": "4096",
        "go": "next",
    }
    response = as_deployer.post(reverse("jobs:wizard"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    draft = Draft.objects.get()
    model = draft.manifest["spec"]["source"]["model"]
    assert model["uri"].startswith(f"hf://{BGE}:")  # pinned to the commit checked
    assert model["serving"]["maxContextTokens"] == 4096


def test_storage_uri_is_carried_as_typed(as_deployer):
    step = as_deployer.get(
        reverse("jobs:wizard"), {"uri": "s3://bucket/churn", "format": "sklearn"}
    ).content.decode()
    assert 'name="storage_uri" value="s3://bucket/churn"' in step
    assert 'value="storage" checked' in step


def test_a_viewer_is_not_offered_deploy(as_viewer):
    html = page(as_viewer, uri=BGE)
    assert SERVABLE in html and "Deploy this model" not in html


def test_a_model_that_cannot_serve_is_not_offered_deploy(as_deployer):
    html = page(as_deployer, uri="acme/nothing-here")
    assert "Deploy this model" not in html


def test_missing_token_links_the_profile_for_an_admin(as_admin):
    html = page(as_admin, uri=LLAMA)
    assert "no Hugging Face token" in html
    link = reverse("jobs:profile-edit", args=["local"])
    assert f'<a href="{link}">Set the Hugging Face token of profile local</a>' in html
    assert "Deploy this model" not in html


def test_missing_token_tells_a_deployer_whom_to_ask(as_deployer):
    html = page(as_deployer, uri=LLAMA)
    assert "Ask an admin of" in html and "profile local" in html
    assert reverse("jobs:profile-edit", args=["local"]) not in html


def test_without_context_the_form_carries_only_model_and_profile(as_deployer):
    assert deploy_form(page(as_deployer, uri=BGE)) == {"uri": f"hf://{BGE}", "profile": "local"}
