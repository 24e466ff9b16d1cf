"""The dashboard of an organisation with nothing deployed: the first models it suggests, the
one-click deploy (POST with CSRF, a free name, the model's page), who sees the button, and the
hint to serve a folder from disk when the Hub does not answer."""

from __future__ import annotations

import html
import socket
import threading
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from jobs.backends.local import runtimes as rt
from jobs.deploy import apply, dry_run
from jobs.models import Application
from jobs.wizard.drafts import unsaved_draft
from jobs.wizard.first_models import first_manifest
from models_catalog import hub_reach
from models_catalog.recommended import FIRST_MODELS
from tests.fakes.cpu_runtime import install_fake
from tests.helpers import SHORTEST, client_for

ROOT = Path(__file__).resolve().parents[2]
CHAT = "smollm2-135m-instruct"
DEPLOY_CHAT = reverse("jobs:first-model-deploy", args=[CHAT])


@pytest.fixture(autouse=True)
def fresh_reach():
    hub_reach.clear()
    yield
    hub_reach.clear()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound once to learn a free one, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def hub_down(monkeypatch, closed_port):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")


def first_models_section(response) -> str:
    html = response.content.decode()
    start = html.find('id="first-models"')
    return html[start : html.find("</section>", start)] if start >= 0 else ""


@pytest.mark.parametrize("persona", ["as_admin", "as_deployer"])
def test_members_who_deploy_see_a_deploy_button_for_each_first_model(persona, request):
    section = first_models_section(request.getfixturevalue(persona).get("/"))
    for model in FIRST_MODELS:
        assert model.label in section and model.uri in section
        assert f'action="{reverse("jobs:first-model-deploy", args=[model.key])}"' in section
    assert 'id="hub-offline"' not in section


def test_a_viewer_sees_the_first_models_without_the_button(as_viewer):
    section = first_models_section(as_viewer.get("/"))
    assert all(model.label in section for model in FIRST_MODELS)
    assert "<form" not in section and "jobs:first-model-deploy" not in section
    assert "an organisation member who deploys models can start one" in section


def test_an_organisation_with_an_application_is_not_offered_first_models(admin, as_admin):
    apply(SHORTEST, admin)
    assert first_models_section(as_admin.get("/")) == ""


def test_one_click_deploys_under_a_free_name_and_opens_the_models_page(admin, as_admin, outsider):
    response = as_admin.post(DEPLOY_CHAT)
    assert response.status_code == 302
    assert response["Location"] == reverse("jobs:application-detail", args=[CHAT])
    made = Application.objects.get(organization=admin.organization, name=CHAT)
    model = made.manifest["spec"]["source"]["model"]
    assert model["uri"].startswith("hf://HuggingFaceTB/SmolLM2-135M-Instruct:")  # pinned
    assert made.manifest["spec"]["profileName"] == "local"
    assert made.revisions.count() == 1  # through apply: a revision, handed to the backend

    again = as_admin.post(DEPLOY_CHAT)
    assert again["Location"] == reverse("jobs:application-detail", args=[f"{CHAT}-2"])
    names = set(admin.organization.applications.values_list("name", flat=True))
    assert names == {CHAT, f"{CHAT}-2"}
    # The other organisation has nothing, and is still offered its first models.
    assert not Application.objects.filter(organization=outsider.organization).exists()
    assert CHAT in first_models_section(client_for(outsider).get("/"))


def test_one_click_takes_a_name_no_draft_holds_either(deployer, as_deployer):
    draft = unsaved_draft(deployer, {"spec": {"name": CHAT}})
    draft.save()
    response = as_deployer.post(DEPLOY_CHAT)
    assert response["Location"] == reverse("jobs:application-detail", args=[f"{CHAT}-2"])


def test_one_click_needs_post_and_the_csrf_token(admin):
    browser = Client(enforce_csrf_checks=True, headers={"X-Page-Organization": "acme"})
    browser.force_login(admin.user)
    assert browser.get(DEPLOY_CHAT).status_code == 405
    assert browser.post(DEPLOY_CHAT).status_code == 403
    assert not Application.objects.exists()
    page = browser.get("/")
    token = page.cookies["csrftoken"].value
    response = browser.post(DEPLOY_CHAT, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Application.objects.filter(name=CHAT).exists()


def test_a_viewer_cannot_deploy_a_first_model(as_viewer):
    assert as_viewer.post(DEPLOY_CHAT).status_code == 403
    assert not Application.objects.exists()


def test_an_unknown_first_model_is_not_found(as_deployer):
    assert as_deployer.post(reverse("jobs:first-model-deploy", args=["gpt-5"])).status_code == 404


@pytest.fixture
def no_model_server(settings, tmp_path, monkeypatch):
    """The real local command on a machine without vLLM and without the CPU runtimes."""
    settings.SERVEDECK_LOCAL_COMMAND = ""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    settings.SERVEDECK_RUNTIMES_DIR = str(tmp_path / "runtimes")
    settings.SERVEDECK_MODELS_DIR = str(tmp_path / "models")


def test_a_refused_first_model_goes_back_to_the_dashboard_with_every_reason(
    as_admin, no_model_server, tmp_path
):
    response = as_admin.post(DEPLOY_CHAT, follow=True)
    assert response.redirect_chain == [(reverse("console:home"), 302)]
    text = html.unescape(response.content.decode())
    assert "The model was not deployed:" in text
    # Its one reason, Check model's: the chat model needs transformers serve, not installed in
    # this machine's runtimes folder, and the command that installs it there.
    runtimes = tmp_path / "runtimes"
    assert (
        "Chat and completions on this machine needs the CPU runtime transformers serve, which "
        f"is not installed in {runtimes}. Install it with: "
        f"SERVEDECK_RUNTIMES_DIR={runtimes} {ROOT / 'scripts' / 'cpu_runtimes.sh'} transformers"
    ) in text
    assert not Application.objects.exists()


# ---- the Hub does not answer ----


def test_the_dashboard_says_how_to_serve_a_folder_when_the_hub_does_not_answer(
    as_deployer, hub_down, closed_port, settings, tmp_path
):
    settings.SERVEDECK_MODELS_DIR = str(tmp_path / "models")
    section = first_models_section(as_deployer.get("/"))
    assert 'id="hub-offline"' in section
    assert f"http://127.0.0.1:{closed_port}" in section and "refused" in section
    assert "SERVEDECK_MODELS_DIR" in section and str(tmp_path / "models") in section
    assert f"uri: file://{tmp_path / 'models'}/SmolLM2-135M-Instruct" in section
    assert "apiVersion: servedeck.io/v1" in section  # the example manifest
    assert reverse("jobs:wizard") in section
    assert "jobs:first-model-deploy" not in section and "<form" not in section


def test_the_hub_is_asked_once_in_a_few_minutes(as_admin, fake_hub_server):
    fake_hub_server.reset_log()
    as_admin.get("/")
    as_admin.get("/")
    asked = [r for r in fake_hub_server.requests if r.path.startswith("/api/models")]
    assert len(asked) == 1, asked


def test_reach_of_the_fake_hub_and_of_a_closed_port(fake_hub_server, closed_port):
    assert hub_reach.hub_reach(fake_hub_server.url).reachable
    down = hub_reach.hub_reach(f"http://127.0.0.1:{closed_port}")
    assert not down.reachable and down.why == "the connection was refused"


def test_a_hub_that_never_answers_is_given_up_on():
    """A listener that accepts and says nothing: the read times out (TIMEOUT), not the page."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        accepted = []
        thread = threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True)
        thread.start()
        reach = hub_reach.hub_reach(f"http://127.0.0.1:{silent.getsockname()[1]}")
        for connection, _ in accepted:
            connection.close()
    assert not reach.reachable
    assert reach.why == f"no answer within {hub_reach.TIMEOUT:g} s"


# Each first model on this machine without vLLM: the fake Hub's commit of its repository (the
# sha1 of its id), the CPU runtime that serves it and what that server does.
ON_THE_CPU = {
    "smollm2-135m-instruct": (
        "bed3655d44736098fa59a0661d724a73da7c5654",
        "transformers: transformers serve serves chat and completions",
    ),
    "all-minilm-l6-v2": (
        "d46f7701826b96cba8ae31f4b54fd066f8059af4",
        "infinity: infinity-emb serves embeddings",
    ),
    "faster-whisper-tiny-en": (
        "c09e422e95e7984228506c968e76edb65a6267ef",
        "faster-whisper: faster-whisper-server serves transcription",
    ),
}


@pytest.mark.parametrize("model", FIRST_MODELS, ids=lambda m: m.key)
def test_every_first_model_passes_the_dry_run_on_a_machine_with_the_cpu_runtimes(
    model,
    admin,
    cpu_machine,
):
    """The Hub's repository (the fake Hub's copy) checked for the local profile: each first
    model gets a CPU runtime here, so a newcomer's click deploys it."""
    runtimes, _ = cpu_machine
    for name in rt.CPU_RUNTIMES:
        install_fake(runtimes, name)
    checked = dry_run(first_manifest(model, model.key, "local"), admin.organization)
    assert not checked.refusals, checked.refusals
    commit, served_by = ON_THE_CPU[model.key]
    assert checked.action == "create"
    assert checked.check.verdict == "The platform can serve this model."
    spec = checked.manifest["spec"]
    assert (spec["name"], spec["profileName"]) == (model.key, "local")
    source = spec["source"]["model"]
    assert source["uri"] == f"{model.uri}:{commit}"  # pinned to the commit the Hub answered
    assert source["resources"] == {"cpu": "1", "memory": "4Gi", "nodesPerReplica": 1}
    assert (source["scaling"]["minReplicas"], source["scaling"]["maxReplicas"]) == (1, 1)
    (said,) = checked.warnings  # where it runs, said once, on the model's uri
    assert said.path == "spec.source.model.uri" and said.level == "warning"
    assert said.message.startswith(f"On this machine it runs on {served_by}; ")
    assert "vLLM is not installed on this machine" in said.message
