"""What one wizard action costs: dry runs, parses, Check model calls and renders (counted by
spies that wrap the product's own functions and call them), and the server-side dry runs the
Kubernetes emulator receives. One dry run per request; the cluster is asked at Review and
Deploy only; a deploy (the wizard's, a REST API PUT) decides the deploy permission, parses,
checks and renders once: the backend applies the objects its dry run rendered."""

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

import pytest
from django.urls import reverse

import accesspolicies.scope
import jobs.deploy
import jobs.dry_run
import jobs.manifest
import jobs.render
from jobs.models import Draft
from tests.helpers import bearer

QWEN = "Qwen/Qwen2.5-7B-Instruct"
QWEN_COMMIT = "24668f3e831ec22a450368581ff8806f933c208f"
HTMX = {"HX-Request": "true"}
STEPS = ("model", "check", "compute", "access", "api")
PRODUCT = ("accesspolicies", "console", "jobs", "models_catalog")


@dataclass
class Calls:
    counts: Counter = field(default_factory=Counter)

    def spy(self, monkeypatch, module, name: str, label: str) -> None:
        real = getattr(module, name)

        def counted(*args, **kwargs):
            self.counts[label] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    def spy_decisions(self, monkeypatch, action: str, label: str) -> None:
        """The role decision (accesspolicies.scope.require) for `action`, in every module of
        the product that imported it."""
        real = accesspolicies.scope.require

        def counted(membership, asked, what):
            if asked == action:
                self.counts[label] += 1
            return real(membership, asked, what)

        for name, module in list(sys.modules.items()):
            if name.split(".")[0] in PRODUCT and getattr(module, "require", None) is real:
                monkeypatch.setattr(module, "require", counted)

    def take(self, labels=("dry runs", "parses", "check model")) -> dict:
        taken = {k: self.counts[k] for k in labels}
        self.counts.clear()
        return taken


@pytest.fixture
def calls(monkeypatch) -> Calls:
    calls = Calls()
    calls.spy(monkeypatch, jobs.deploy, "dry_run", "dry runs")  # the verbs' and wizard's entry
    calls.spy(monkeypatch, jobs.manifest, "parse", "parses")
    calls.spy(monkeypatch, jobs.dry_run, "check_for_profile", "check model")
    calls.spy(monkeypatch, jobs.render, "render", "renders")  # render_for_profile's, everywhere
    calls.spy_decisions(monkeypatch, "deploy", "deploy decisions")
    return calls


def server_side_dry_runs(kube) -> int:
    return sum(1 for r in kube.requests if r.query.get("dryRun") == "All")


def model_form(profile: str) -> dict:
    return {
        "name": "qwen-chat",
        "profile": profile,
        "source": "hub",
        "repo": QWEN,
        "revision": QWEN_COMMIT,
        "format": "",
        "go": "next",
    }


def url(step: str, draft: Draft) -> str:
    return reverse(f"jobs:wizard-{step}", kwargs={"key": draft.key})


ONE = {"dry runs": 1, "parses": 1, "check model": 1}
DEPLOY = ("deploy decisions", "dry runs", "parses", "check model", "renders")
ONE_DEPLOY = dict.fromkeys(DEPLOY, 1)


# The local profile's catalog offers GPUs this machine does not have: the machine says so
# before anything is dry-run, so only the CPU size is (one dry run, one parse). Check model is
# asked twice: the sizing question (one request at once) and the CPU size's own, whose filled
# requests-at-once is the CPU's (two per core). Pinned so it does not grow.
LOCAL_WITHOUT_GPU = {"dry runs": 1, "parses": 1, "check model": 2}


@pytest.mark.parametrize("profile, sized", [("prod", ONE), ("local", LOCAL_WITHOUT_GPU)])
def test_a_model_step_post_is_one_dry_run_one_parse_one_check(
    as_deployer, calls, prod, kube, profile, sized
):
    response = as_deployer.post(reverse("jobs:wizard"), model_form(profile))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert calls.take() == sized
    draft = Draft.objects.get()
    response = as_deployer.post(url("model", draft), model_form(profile))  # nothing new
    assert response.status_code == 302
    assert calls.take() == ONE
    assert server_side_dry_runs(kube) == 0


def test_steps_before_review_never_ask_the_cluster(as_deployer, calls, prod, kube):
    as_deployer.post(reverse("jobs:wizard"), model_form("prod"))
    draft = Draft.objects.get()
    assert Draft.objects.get().manifest["spec"]["profileName"] == "prod"
    calls.take()
    for step in STEPS:
        response = as_deployer.get(url(step, draft))
        assert response.status_code == 200, step
        assert calls.take() == ONE, step
    assert server_side_dry_runs(kube) == 0
    for step in ("compute", "access"):  # Next to the following step, by htmx
        response = as_deployer.post(url(step, draft), {"go": "next"}, headers=HTMX)
        assert response.status_code == 200, step
        assert calls.take() == ONE, step
    assert server_side_dry_runs(kube) == 0


def test_review_and_deploy_ask_the_cluster_once_each(as_deployer, calls, prod, kube):
    as_deployer.post(reverse("jobs:wizard"), model_form("prod"))
    draft = Draft.objects.get()
    calls.take()
    page = as_deployer.get(url("review", draft)).content.decode()
    assert calls.take() == ONE
    reviewed_asks = server_side_dry_runs(kube)
    assert reviewed_asks >= 1
    reviewed = re.search(r'name="reviewed" value="(\w+)"', page).group(1)
    response = as_deployer.post(
        reverse("jobs:wizard-deploy", kwargs={"key": draft.key}), {"reviewed": reviewed}
    )
    assert response.status_code == 302
    # Deploy applies the dry run it made, not a second one, and the objects it rendered.
    assert calls.take(DEPLOY) == ONE_DEPLOY
    assert server_side_dry_runs(kube) == 2 * reviewed_asks
    assert revision_of(kube, "qwen-chat") == "1"


def revision_of(kube, name: str) -> str:
    """The deploy revision the InferenceService on the cluster says it came from."""
    isvc = kube.get("InferenceService", name, "models")
    return isvc["metadata"]["annotations"]["servedeck.io/revision"]


def shortest(uri: str, **model) -> str:
    spec = {
        "name": "qwen",
        "profileName": "prod",
        "source": {"type": "Model", "model": {"uri": uri, **model}},
    }
    return json.dumps({"apiVersion": "servedeck.io/v1", "kind": "Application", "spec": spec})


# Unpinned, so Check model's answer (the commit) changes a default: the document is still
# read once. Pinned, nothing changes.
@pytest.mark.parametrize("uri", [f"hf://{QWEN}", f"hf://{QWEN}:{QWEN_COMMIT}"])
def test_a_rest_api_put_parses_checks_and_renders_once(client, deployer, calls, prod, kube, uri):
    client.defaults.update(bearer(deployer))
    created = client.post("/api/v1/applications", shortest(uri), content_type="application/json")
    assert created.status_code == 201, created.content
    assert calls.take(DEPLOY) == ONE_DEPLOY  # a create is the same verb
    changed = shortest(uri, scaling={"minReplicas": 1, "maxReplicas": 2})
    response = client.put("/api/v1/applications/qwen", changed, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["action"] == "updated" and response.json()["revision"] == 2
    assert calls.take(DEPLOY) == ONE_DEPLOY
    assert revision_of(kube, "qwen") == "2"
    assert kube.get("InferenceService", "qwen", "models")["spec"]["predictor"]["maxReplicas"] == 2


def test_an_htmx_next_into_review_asks_the_cluster(as_deployer, calls, prod, kube):
    as_deployer.post(reverse("jobs:wizard"), model_form("prod"))
    draft = Draft.objects.get()
    response = as_deployer.post(url("api", draft), {"go": "next"}, headers=HTMX)
    assert response.status_code == 200
    assert "Server-side dry run" in response.content.decode()
    assert server_side_dry_runs(kube) >= 1
