"""The REST API: the same verbs as the CLI, with tokens or the session, errors as JSON."""

import json

import pytest
import yaml
from django.core.exceptions import PermissionDenied

from accesspolicies.models import PersonalAccessToken
from jobs import deploy as verbs
from jobs.access import as_deployer
from tests.helpers import SHORTEST, api_error, bearer, problems

URL = "/api/v1/applications"
BGE_COMMIT = "2022e1cf8e582467a26c968ba4bfacad55b48d11"


def post_yaml(client, text, url=URL, **headers):
    return client.post(url, data=text, content_type="application/yaml", **headers)


@pytest.fixture
def api(client, deployer):
    """A plain client carrying the deployer's token: no session, no CSRF cookie."""
    client.defaults.update(bearer(deployer))
    return client


def test_shortest_manifest_dry_runs_clean_and_saves_nothing(api, org):
    response = post_yaml(api, SHORTEST, URL + "?dryRun=true")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ok"] is True and body["action"] == "create"
    assert body["refusals"] == []
    assert body["runtime"] and body["scaling"]
    spec = body["manifest"]["spec"]
    assert spec["namespace"] == "default" and spec["syncType"] == "Auto"
    assert spec["source"]["model"]["format"] == "vLLM"
    assert api.get(URL).json() == []


def test_create_then_get_shows_every_default(api):
    created = post_yaml(api, SHORTEST)
    assert created.status_code == 201, created.content
    assert created.json()["action"] == "created" and created.json()["revision"] == 1
    got = api.get(f"{URL}/bge-embed").json()
    model = got["spec"]["source"]["model"]
    assert model["runtime"] == {"engine": "vllm", "isolation": "Container"}
    assert model["resources"]["memory"] == "5Gi"  # what holds bge-m3's weights on CPU
    assert model["serving"]["maxContextTokens"] == 8192  # its model master's
    assert model["uri"] == f"hf://BAAI/bge-m3:{BGE_COMMIT}"  # pinned to main's commit
    assert model["scaling"] == {"minReplicas": 1, "maxReplicas": 1, "metric": None}
    # the local backend started the (stand-in) model server; it is coming up
    assert got["status"]["phase"] in ("Loading", "Running")
    assert got["status"]["desiredReplicas"] == 1


def test_applying_what_get_returned_changes_nothing(api):
    post_yaml(api, SHORTEST)
    got = api.get(f"{URL}/bge-embed").json()
    again = api.put(f"{URL}/bge-embed", data=json.dumps(got), content_type="application/json")
    assert again.status_code == 200, again.content
    assert again.json()["action"] == "unchanged" and again.json()["revision"] is None
    assert len(api.get(f"{URL}/bge-embed/history").json()) == 1


def test_update_makes_a_new_revision_and_rollback_applies_an_old_one(api):
    post_yaml(api, SHORTEST)
    changed = SHORTEST.replace(
        "uri: hf://BAAI/bge-m3", "uri: hf://BAAI/bge-m3\n      resources:\n        memory: 6Gi"
    )
    updated = api.put(f"{URL}/bge-embed", data=changed, content_type="application/yaml")
    assert updated.status_code == 200 and updated.json()["revision"] == 2
    rolled = api.post(
        f"{URL}/bge-embed/rollback", data={"revision": 1}, content_type="application/json"
    )
    assert rolled.status_code == 200, rolled.content
    assert rolled.json()["revision"] == 3
    history = api.get(f"{URL}/bge-embed/history").json()
    assert [h["number"] for h in history] == [3, 2, 1]
    assert history[0]["rolledBackFrom"] == 1
    assert (
        api.get(f"{URL}/bge-embed").json()["spec"]["source"]["model"]["resources"]["memory"]
        == "5Gi"
    )


def test_rollback_to_a_missing_revision_says_which_exist(api):
    post_yaml(api, SHORTEST)
    response = api.post(
        f"{URL}/bge-embed/rollback", data={"revision": 7}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "revisions 1 to 1" in problems(response)[0]["message"]


def test_several_mistakes_come_back_together_as_path_and_message(api):
    bad = (
        SHORTEST.replace("name: bge-embed", "name: Bad_Name")
        .replace("profileName: local", "profileName: locl")
        .replace("type: Model", "type: Model\n    extra: 1")
    )
    response = post_yaml(api, bad)
    assert response.status_code == 400
    listed = problems(response)
    paths = {p["path"] for p in listed if p["level"] == "refusal"}
    assert {"spec.name", "spec.profileName", "spec.source.extra"} <= paths
    assert all(p["message"] for p in listed)
    assert "refused" in api_error(response)["message"]
    profile_problem = next(p for p in listed if p["path"] == "spec.profileName")
    assert "local" in profile_problem["message"]  # the closest existing profile
    assert api.get(URL).json() == []


def test_yaml_that_does_not_parse_names_the_line(api):
    response = post_yaml(api, "spec:\n  name: [unclosed\n")
    assert response.status_code == 400
    assert "line" in problems(response)[0]["message"]


def test_create_twice_is_a_conflict(api):
    post_yaml(api, SHORTEST)
    response = post_yaml(api, SHORTEST)
    assert response.status_code == 409
    assert "already exists" in problems(response)[0]["message"]


def test_put_with_another_name_is_refused(api):
    post_yaml(api, SHORTEST)
    other = SHORTEST.replace("name: bge-embed", "name: other")
    response = api.put(f"{URL}/bge-embed", data=other, content_type="application/yaml")
    assert response.status_code == 400
    assert problems(response)[0]["path"] == "spec.name"


def test_delete(api):
    post_yaml(api, SHORTEST)
    assert api.delete(f"{URL}/bge-embed").status_code == 204
    assert api.get(f"{URL}/bge-embed").status_code == 404


def test_viewer_cannot_apply_but_can_read(client, viewer, deployer):
    client.defaults.update(bearer(deployer))
    post_yaml(client, SHORTEST)
    client.defaults.update(bearer(viewer))
    response = post_yaml(client, SHORTEST.replace("bge-embed", "second"))
    assert response.status_code == 403
    assert "viewer" in api_error(response)["message"]
    assert client.get(f"{URL}/bge-embed").status_code == 200
    assert client.delete(f"{URL}/bge-embed").status_code == 403


def test_outsider_gets_404_for_another_orgs_application(client, deployer, outsider):
    client.defaults.update(bearer(deployer))
    post_yaml(client, SHORTEST)
    client.defaults.update(bearer(outsider))
    assert client.get(f"{URL}/bge-embed").status_code == 404
    assert client.get(f"{URL}/bge-embed/history").status_code == 404
    assert client.delete(f"{URL}/bge-embed").status_code == 404
    assert client.get(URL).json() == []


def test_a_revoked_token_is_refused(client, deployer):
    token, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    assert client.get(URL, **headers).status_code == 200
    token.revoke()
    response = client.get(URL, **headers)
    assert response.status_code == 401
    assert "Bearer" in api_error(response)["message"]


@pytest.mark.parametrize(
    "header",
    ["Bearer sdp_nottherightone", "Bearer ", "Basic abc", "Bearer " + "x" * 500],
    ids=["wrong", "empty", "other-scheme", "long"],
)
def test_bad_credentials_are_401(client, db, header):
    assert client.get(URL, HTTP_AUTHORIZATION=header).status_code == 401


def test_session_auth_needs_csrf_for_changes(deployer):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(deployer.user)
    assert browser.get(URL).status_code == 200
    assert post_yaml(browser, SHORTEST).status_code == 403


def test_openapi_document_lists_the_endpoints(client, db):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/applications" in paths
    assert "/api/v1/applications/{name}/rollback" in paths
    assert "application/yaml" in json.dumps(paths["/api/v1/applications"]["post"])


def test_manual_sync_waits_for_deploy(api):
    manual = SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual")
    assert post_yaml(api, manual).status_code == 201
    history = api.get(f"{URL}/bge-embed/history").json()
    assert history[0]["outcome"] == "Waiting for Deploy"
    deployed = api.post(f"{URL}/bge-embed/deploy")
    assert deployed.status_code == 200
    assert api.get(f"{URL}/bge-embed/history").json()[0]["outcome"] == "Applied"


def test_get_output_as_yaml_round_trips(api):
    post_yaml(api, SHORTEST)
    got = api.get(f"{URL}/bge-embed").json()
    text = yaml.safe_dump(got)
    response = api.put(f"{URL}/bge-embed", data=text, content_type="application/yaml")
    assert response.json()["action"] == "unchanged"


def test_a_viewer_cannot_dry_run_either(client, viewer):
    client.defaults.update(bearer(viewer))
    assert post_yaml(client, SHORTEST, URL + "?dryRun=true").status_code == 403


def test_a_viewers_put_is_refused_once_a_name_is_found(client, viewer, deployer):
    """A PUT finds the application (404 whatever the role), then decides the role once (403),
    before the body is read or dry-run."""
    client.defaults.update(bearer(deployer))
    post_yaml(client, SHORTEST)
    client.defaults.update(bearer(viewer))
    for query in ("", "?dryRun=true"):
        put = client.put(f"{URL}/bge-embed{query}", data=SHORTEST, content_type="application/yaml")
        assert put.status_code == 403
        assert "viewer" in api_error(put)["message"]
        other = client.put(f"{URL}/missing{query}", data=SHORTEST, content_type="application/yaml")
        assert other.status_code == 404
    assert [r["number"] for r in client.get(f"{URL}/bge-embed/history").json()] == [1]


def test_the_verbs_decide_the_role_on_a_member_and_take_a_decision_made(viewer, deployer):
    """Whatever calls a verb that changes an application is protected: the verb decides on a
    membership it is given; a Deployer (decided earlier in the request) is not asked again."""
    with pytest.raises(PermissionDenied):
        verbs.apply(SHORTEST, viewer)
    with pytest.raises(PermissionDenied):
        as_deployer(viewer)
    decided = as_deployer(deployer)
    assert as_deployer(decided) is decided
    assert verbs.apply(SHORTEST, decided).created


def test_a_deactivated_users_token_is_refused(client, deployer):
    client.defaults.update(bearer(deployer))
    assert client.get(URL).status_code == 200
    deployer.user.is_active = False
    deployer.user.save()
    assert client.get(URL).status_code == 401
