"""Check model from the page, the REST API and the command line, against the fake Hub."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from jobs.models import Profile
from models_catalog.check_types import SERVABLE
from tests.fakes.hub import GOOD_TOKEN
from tests.helpers import bearer

LLAMA = "hf://meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def token_on_profile(org, monkeypatch):
    monkeypatch.setenv("HF_TOKEN_ACME", GOOD_TOKEN)
    org.token_variables = ["HF_TOKEN_ACME"]  # the operator allowed it
    org.save()
    Profile.objects.filter(organization=org).update(hf_token_ref="env/HF_TOKEN_ACME")


def checkmodel(*args):
    out = StringIO()
    call_command("checkmodel", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_cli_llama_json_with_the_profiles_token(admin, token_on_profile):
    answer = json.loads(checkmodel(LLAMA, "--json"))
    assert answer["verdict"] == SERVABLE and answer["can_serve"] is True
    assert answer["architecture"] == "LlamaForCausalLM"
    assert answer["parameters"] > 8 * 10**9
    assert answer["kv_bytes_per_token"] == 131072
    assert answer["memory_needed_bytes"] > answer["weight_bytes"]
    assert answer["suggestion"]["accelerator"] == "gpu"
    assert answer["profile"] == "local"


def test_cli_text_and_context(admin, token_on_profile):
    out = checkmodel(LLAMA, "--context", "8192")
    assert out.startswith(SERVABLE)
    assert "suggested:" in out and "8,0" in out  # parameters with separators


def test_cli_exits_1_when_it_cannot_serve(admin):
    with pytest.raises(CommandError) as raised:
        checkmodel(LLAMA)  # gated, and the profile has no token
    assert raised.value.returncode == 1


def test_cli_unknown_profile(admin):
    with pytest.raises(CommandError, match="--profile"):
        checkmodel(LLAMA, "--profile", "nope")


def test_api_check_and_search(client, deployer, token_on_profile):
    client.defaults.update(bearer(deployer))
    answer = client.get("/api/v1/models/check", {"uri": LLAMA, "profile": "local"}).json()
    assert answer["verdict"] == SERVABLE
    missing = client.get("/api/v1/models/check", {"uri": "hf://acme/nothing-here"}).json()
    assert missing["can_serve"] is False and missing["next_step"]
    found = client.get("/api/v1/models/search", {"q": "bge"}).json()
    ids = [m["id"] for m in found]
    assert "BAAI/bge-m3" in ids
    assert {"downloads", "likes", "pipelineTag", "gated", "lastModified"} <= set(found[0])
    assert client.get("/api/v1/models/check", {"uri": LLAMA, "profile": "nope"}).status_code == 404


def test_api_check_needs_authentication(client, db):
    assert client.get("/api/v1/models/check", {"uri": LLAMA}).status_code == 401


def test_check_page_and_fragment(as_viewer, token_on_profile):
    url = reverse("models_catalog:check")
    page = as_viewer.get(url, {"uri": LLAMA}).content.decode()
    assert SERVABLE in page and "LlamaForCausalLM" in page and "<html" in page
    fragment = as_viewer.get(url, {"uri": "hf://acme/remote-code-lm"}, HTTP_HX_REQUEST="true")
    text = fragment.content.decode()
    assert "<html" not in text and "Next step" in text
    bad = as_viewer.get(url, {"uri": LLAMA, "context": "lots"}).content.decode()
    assert "not a whole number" in bad
