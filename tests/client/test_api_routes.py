"""The REST routes the terminal client needs, as any API client meets them: who the token acts
as (`/me`), render a manifest (a dry run: a deployer's), and a replica's log (on this machine;
a cluster's pods are read with kubectl). The same auth, scoping and error shape as the rest."""

import pytest

from jobs.deploy import apply
from jobs.models import Cluster, Profile
from tests.gateway.support import make_app as running_app
from tests.helpers import SHORTEST, api_error, bearer


def make_app(org, name, endpoint, profile):
    app = running_app(org, name, endpoint)
    app.profile = profile
    app.save()
    return app


@pytest.fixture
def api(client):
    def call(method, path, membership, **kwargs):
        return getattr(client, method)(f"/api/v1{path}", **bearer(membership), **kwargs)

    return call


def test_me_says_who_where_and_the_role(api, viewer, outsider, client):
    assert api("get", "/me", viewer).json() == {
        "user": "vera",
        "organization": "acme",
        "organizationName": "Acme",
        "role": "viewer",
    }
    assert api("get", "/me", outsider).json()["organization"] == "globex"
    assert api_error(client.get("/api/v1/me"))["status"] == 401


def test_render_answers_the_objects_the_note_and_refusals(api, deployer, viewer):
    yaml = {"data": SHORTEST, "content_type": "application/yaml"}
    rendered = api("post", "/applications/render", deployer, **yaml)
    assert rendered.status_code == 200, rendered.content
    body = rendered.json()
    assert body["objects"][0]["kind"] == "InferenceService"
    assert body["text"].startswith("---\n") and "kind: InferenceService" in body["text"]
    assert body["note"].startswith("Profile local runs on this machine")
    as_json = api("post", "/applications/render?output=json", deployer, **yaml).json()["text"]
    assert '"kind": "List"' in as_json
    assert api("post", "/applications/render?output=toml", deployer, **yaml).status_code == 422

    bad = SHORTEST.replace("profileName: local", "profileName: nowhere")
    refused = api("post", "/applications/render", deployer, data=bad, content_type="text/yaml")
    error = api_error(refused)
    assert refused.status_code == 400 and error["problems"][0]["path"] == "spec.profileName"
    assert api("post", "/applications/render", viewer, **yaml).status_code == 403


def test_logs_are_a_deployers_and_name_kubectl_for_a_cluster(
    api, admin, deployer, viewer, outsider
):
    apply(SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual"), admin)
    answered = api("get", "/applications/bge-embed/logs?lines=5", deployer)
    assert answered.status_code == 200 and answered.json() == {
        "name": "bge-embed",
        "replica": 0,
        "lines": [],
        "cursor": "b0.0",  # no log yet: followed from its start
    }
    assert api("get", "/applications/bge-embed/logs", viewer).status_code == 403
    assert api("get", "/applications/bge-embed/logs", outsider).status_code == 404
    too_many = api("get", "/applications/bge-embed/logs?lines=5000", deployer)
    assert api_error(too_many)["problems"][0]["path"] == "query.lines"
    far = api_error(api("get", "/applications/bge-embed/logs?replica=3", deployer))
    assert far["problems"][0]["path"] == "replica" and "not a replica" in far["message"]

    org = admin.organization
    cluster = Cluster.objects.create(organization=org, name="gpu", backend="kubernetes")
    gpu = Profile.objects.create(organization=org, name="gpu", cluster=cluster, namespace="models")
    make_app(org, "on-gpu", "http://on-gpu.models.svc", profile=gpu)
    # A cluster's pods are read through its Kubernetes API; this one has none to answer.
    down = api("get", "/applications/on-gpu/logs", deployer)
    assert down.status_code == 503 and "gpu" in api_error(down)["message"]
