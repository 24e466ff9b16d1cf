"""A model folder whose CPU runtime is not installed: every surface that refuses it names the
exact command that installs the runtime (the REST API's dry run, the wizard's Check model and
Review, Deploy from YAML), the one runtimes.install_command spells."""

from __future__ import annotations

import html
import json

import pytest
from django.urls import reverse

from jobs.backends.local import runtimes as rt
from tests.helpers import TINY_LLAMA_CONFIG, bearer, problems
from tests.jobs.backends.local.test_local_cpu_wiring import safetensors
from tests.jobs.wizard.test_wizard_views import start, text, url

API = "/api/v1/applications"


@pytest.fixture
def folder_without_runtime(settings, tmp_path, monkeypatch):
    """The real local command, no vLLM, no CPU runtime installed, and a chat model's folder in
    the models folder; the command that would install its runtime."""
    settings.SERVEDECK_LOCAL_COMMAND = ""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    runtimes, models = tmp_path / "runtimes", tmp_path / "models"
    settings.SERVEDECK_RUNTIMES_DIR = str(runtimes)
    settings.SERVEDECK_MODELS_DIR = str(models)
    folder = models / "tiny-llama"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    safetensors(folder / "model.safetensors", {"embed": [100, 64]})
    return folder, rt.install_command("transformers", runtimes)


def manifest(folder) -> str:
    return f"""\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: tiny-chat
  profileName: local
  source:
    type: Model
    model:
      uri: file://{folder}
"""


def test_the_rest_dry_run_names_the_install_command(client, deployer, folder_without_runtime):
    folder, command = folder_without_runtime
    response = client.post(
        f"{API}?dryRun=true", manifest(folder), content_type="application/yaml", **bearer(deployer)
    )
    assert response.status_code == 400
    messages = [p["message"] for p in problems(response)]
    assert any(command in m for m in messages), messages


def test_deploy_from_yaml_names_the_install_command(as_deployer, folder_without_runtime):
    folder, command = folder_without_runtime
    response = as_deployer.post(reverse("jobs:deploy-yaml-dry-run"), {"manifest": manifest(folder)})
    assert command in html.unescape(text(response))


def test_the_wizard_names_the_install_command(as_deployer, folder_without_runtime):
    folder, command = folder_without_runtime
    draft = start(
        as_deployer, name="tiny-chat", source="storage", repo="", storage_uri=f"file://{folder}"
    )
    check = html.unescape(text(as_deployer.get(url("check", draft))))
    assert command in check
    review = as_deployer.get(url("review", draft), follow=True)
    assert command in html.unescape(text(review))
