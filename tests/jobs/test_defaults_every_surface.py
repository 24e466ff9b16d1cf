"""The defaults of a model are the same through every surface: the wizard (its steps driven as a
browser submits them, Review, Deploy), the REST API (dry run, create, get) and the command line
(`app apply -f`, `app get -o json|yaml`). A table over the fake Hub's models; the local profile
of this machine (no GPU), so every surface runs the model on its CPU."""

import json
import re
from html.parser import HTMLParser
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

from jobs.models import Application, Draft
from tests.helpers import bearer

API = "/api/v1/applications"
STEPS = ("check", "compute", "access", "api")
COMMIT = re.compile(r"^hf://[^:]+:[0-9a-f]{40}$")


# (repo, what the filled manifest must say: context window, memory, KV cache). The memory
# holds the weights and the runtime in three quarters of it; the KV cache is the rest.
MODELS = [
    pytest.param("BAAI/bge-m3", 8192, "5Gi", "1280Mi", id="embedding"),
    pytest.param("BAAI/bge-reranker-v2-m3", 8192, "5Gi", "1280Mi", id="reranker"),
    pytest.param("Qwen/Qwen2.5-7B-Instruct", 32768, "21Gi", "5376Mi", id="chat"),
    # No model master: the context window is the runtime's own (the model's limit).
    pytest.param("HuggingFaceTB/SmolLM3-3B", None, "9Gi", "2304Mi", id="no-master"),
]


def manifest(name: str, repo: str) -> str:
    return (
        "apiVersion: servedeck.io/v1\nkind: Application\nspec:\n"
        f"  name: {name}\n  profileName: local\n"
        f"  source:\n    type: Model\n    model:\n      uri: hf://{repo}\n"
    )


class FormValues(HTMLParser):
    """What a browser submits from the wizard's form: each enabled input's value, the checked
    radios and boxes, each select's selected option, each textarea's text."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self._inside = False
        self._select: str | None = None
        self._textarea: str | None = None
        self._first_option: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and a.get("id") == "wizard-form":
            self._inside = True
        if not self._inside or "disabled" in a or not a.get("name"):
            if tag == "option" and self._select is not None:
                self._option(a)
            return
        name = a["name"]
        if tag == "input" and a.get("type") not in ("submit", "button"):
            if a.get("type") in ("radio", "checkbox"):
                if "checked" in a:
                    self.values[name] = a.get("value", "on")
            else:
                self.values[name] = a.get("value") or ""
        elif tag == "select":
            self._select, self._first_option = name, None
        elif tag == "textarea":
            self._textarea = name
            self.values[name] = ""

    def _option(self, a):
        value = a.get("value", "")
        if self._first_option is None:
            self._first_option = value
            self.values.setdefault(self._select, value)
        if "selected" in a:
            self.values[self._select] = value

    def handle_data(self, data):
        if self._textarea is not None:
            self.values[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self._inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None


def submitted(page: str) -> dict:
    form = FormValues()
    form.feed(page)
    return form.values


def without_name(doc: dict) -> dict:
    """The filled-in manifest, but for the name each surface gave its application."""
    spec = dict(doc["spec"])
    spec.pop("name")
    return {**doc, "spec": spec}


def through_the_wizard(client, name: str, repo: str) -> tuple[dict, dict]:
    """Deploy `repo` through every step, each submitted as the browser would; what Review
    showed, and what `get` answers for the application deployed."""
    form = {"name": name, "profile": "local", "source": "hub", "repo": repo, "revision": ""}
    response = client.post(reverse("jobs:wizard"), {**form, "format": "", "go": "next"})
    assert response.status_code == 302, response.content.decode()[:2000]
    draft = Draft.objects.get(manifest__spec__name=name)
    for step in STEPS:
        address = reverse(f"jobs:wizard-{step}", kwargs={"key": draft.key})
        page = client.get(address)
        assert page.status_code == 200, (step, page.content.decode()[:2000])
        response = client.post(address, {**submitted(page.content.decode()), "go": "next"})
        assert response.status_code == 302, (step, response.content.decode()[:3000])
    review = client.get(reverse("jobs:wizard-review", kwargs={"key": draft.key}))
    assert review.status_code == 200
    reviewed = re.search(r'name="reviewed" value="(\w+)"', review.content.decode()).group(1)
    shown = yaml.safe_load(
        client.get(reverse("jobs:wizard-download", kwargs={"key": draft.key})).content
    )
    response = client.post(
        reverse("jobs:wizard-deploy", kwargs={"key": draft.key}), {"reviewed": reviewed}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    return shown, Application.objects.get(name=name).manifest


def cli(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize("repo, context, memory, kv_cache", MODELS)
def test_a_models_defaults_are_the_same_through_wizard_api_and_cli(
    as_deployer, deployer, client, tmp_path, repo, context, memory, kv_cache
):
    slug = repo.split("/")[1].lower().replace(".", "-")[:40]
    review, deployed = through_the_wizard(as_deployer, f"w-{slug}", repo)

    headers = bearer(deployer)
    body = manifest(f"a-{slug}", repo)
    dry = client.post(f"{API}?dryRun=true", body, content_type="application/yaml", **headers)
    assert dry.status_code == 200, dry.content.decode()[:2000]
    created = client.post(API, body, content_type="application/yaml", **headers)
    assert created.status_code == 201, created.content.decode()[:2000]
    api_get = client.get(f"{API}/a-{slug}", **headers).json()
    api_get.pop("status")
    wizard_get = client.get(f"{API}/w-{slug}", **headers).json()
    wizard_get.pop("status")

    path = tmp_path / "model.yaml"
    path.write_text(manifest(f"c-{slug}", repo))
    org, user = deployer.organization.slug, deployer.user.username
    cli("app", "apply", "-f", str(path), "--org", org, "--user", user)
    cli_json = json.loads(
        cli("app", "get", f"c-{slug}", "-o", "json", "--org", org, "--user", user)
    )
    cli_yaml = yaml.safe_load(cli("app", "get", f"c-{slug}", "--org", org, "--user", user))
    for got in (cli_json, cli_yaml):
        got.pop("status")

    surfaces = {
        "wizard Review": review,
        "wizard deployed": deployed,
        "wizard app get": wizard_get,
        "API dry run": dry.json()["manifest"],
        "API get": api_get,
        "CLI get -o json": cli_json,
        "CLI get -o yaml": cli_yaml,
    }
    expected = without_name(review)
    for surface, doc in surfaces.items():
        assert without_name(doc) == expected, surface

    model = review["spec"]["source"]["model"]
    assert model["serving"]["maxContextTokens"] == context
    assert model["resources"]["memory"] == memory
    assert model["serving"]["kvCacheSize"] == kv_cache
    assert "accelerator" not in model["resources"]  # no GPU here: the CPU on every surface
    assert COMMIT.match(model["uri"]), model["uri"]  # pinned to the commit it resolved to
