"""One dry-run output shape for every surface (bug 3): the REST API's `?dryRun=true` answer
carries Check model's answer and the rendered objects, as `app apply --dry-run -o json`
prints them; a refused manifest lists every problem, each with its origin (bug 8)."""

import json
from io import StringIO

import yaml
from django.core.management import call_command
from django.urls import reverse

from jobs.dry_run import dry_run
from jobs.models import Draft
from tests.helpers import SHORTEST, bearer, problems

URL = "/api/v1/applications"
ON_PROD = SHORTEST.replace("profileName: local", "profileName: prod")


def api_dry_run(client, deployer, text):
    client.defaults.update(bearer(deployer))
    return client.post(URL + "?dryRun=true", data=text, content_type="application/yaml")


def cli_dry_run(tmp_path, text) -> dict:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    out, err = StringIO(), StringIO()
    call_command("app", "apply", "-f", str(path), "--dry-run", "-o", "json", stdout=out, stderr=err)
    return json.loads(out.getvalue())


def test_the_api_dry_run_answers_check_model_and_the_objects(client, deployer, prod):
    response = api_dry_run(client, deployer, ON_PROD)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["checkModel"]["verdict"] and body["checkModel"]["task"] == "embed"
    assert [obj["kind"] for obj in body["objects"]] == ["InferenceService"]
    assert {p["origin"] for p in body["warnings"]} <= {"schema", "rule", "check-model", "target"}


def test_the_api_and_the_command_line_answer_the_same_shape(
    client, deployer, admin, prod, tmp_path
):
    api = api_dry_run(client, deployer, ON_PROD).json()
    cli = cli_dry_run(tmp_path, ON_PROD)
    assert api.keys() == cli.keys()
    assert api["checkModel"] == cli["checkModel"] and api["objects"] == cli["objects"]
    assert api["warnings"] == cli["warnings"]


def test_a_refused_dry_run_lists_every_problem_with_its_origin(client, deployer, prod):
    text = ON_PROD.replace(
        "uri: hf://BAAI/bge-m3",
        "uri: hf://BAAI/bge-m3\n      cache:\n        enabled: true\n      bogus: 1",
    )
    response = api_dry_run(client, deployer, text)
    assert response.status_code == 400
    found = {(p["path"], p["origin"]) for p in problems(response)}
    model = "spec.source.model"
    assert {
        (f"{model}.bogus", "schema"),
        (f"{model}.cache.enabled", "rule"),  # the profile has no weight cache
        (f"{model}.cache.size", "rule"),  # and the size is missing all the same
    } <= found


def test_an_unpinned_model_is_pinned_to_the_commit_check_model_resolved(org):
    run = dry_run(SHORTEST, org)  # hf://BAAI/bge-m3 follows its main branch
    assert run.check.pin_warning in run.check.warnings  # Check model's own page says it
    uri = run.manifest["spec"]["source"]["model"]["uri"]
    assert uri == f"hf://BAAI/bge-m3:{run.check.revision}"  # the filled manifest pins it
    at_uri = [p for p in run.warnings if p.path == "spec.source.model.uri"]
    assert all("pinned" not in p.message for p in at_uri)  # so neither warns it is not


def test_the_wizards_review_shows_the_same_body_as_the_api(client, deployer, as_deployer, prod):
    """The Review step shows the dry run through the presenter the API and the command line
    share: what it shows of it (runtime, scaling, Check model, warnings, objects) cannot drift."""
    form = {
        "name": "qwen-chat",
        "profile": "prod",
        "source": "hub",
        "repo": "Qwen/Qwen2.5-7B-Instruct",
        "revision": "24668f3e831ec22a450368581ff8806f933c208f",
        "format": "",
        "go": "next",
    }
    assert as_deployer.post(reverse("jobs:wizard"), form).status_code == 302
    draft = Draft.objects.get()
    page = as_deployer.get(reverse("jobs:wizard-review", kwargs={"key": draft.key}))
    shown = page.context["dry_run"]
    api = api_dry_run(client, deployer, yaml.safe_dump(draft.manifest)).json()
    assert shown.keys() == api.keys()
    for key in ("ok", "runtime", "scaling", "checkModel", "objects", "manifest"):
        assert shown[key] == api[key], key
    assert sorted(map(str, shown["warnings"])) == sorted(map(str, api["warnings"]))
    assert shown["objects"] and shown["checkModel"]["verdict"] in page.content.decode()


def test_a_document_that_is_one_quoted_string_is_read_once(client, deployer, org):
    # A valid manifest inside one YAML string: the document is that string, not a manifest.
    quoted = json.dumps(SHORTEST)
    run = dry_run(quoted, org)
    assert run.manifest is None
    [refusal] = run.refusals
    assert refusal.path == "document", refusal
    assert "not a mapping" in refusal.message and "(text)" in refusal.message
    response = api_dry_run(client, deployer, quoted)
    assert response.status_code == 400 and "not a mapping" in response.content.decode()
