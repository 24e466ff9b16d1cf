"""The REST API answers every error in one JSON shape, declared in its OpenAPI document."""

import pytest

from jobs.models import Cluster, Profile
from tests.helpers import SHORTEST, api_error, bearer, problems

URL = "/api/v1/applications"


@pytest.fixture
def api(client, deployer):
    client.defaults.update(bearer(deployer))
    return client


def post_yaml(client, text, url=URL, **headers):
    return client.post(url, data=text, content_type="application/yaml", **headers)


def test_an_unexpected_failure_is_a_json_500_without_the_traceback(api, monkeypatch):
    from jobs import deploy

    def broken(*args, **kwargs):
        raise RuntimeError("internal detail /srv/secret/path")

    monkeypatch.setattr(deploy, "dry_run", broken)  # our own verb, not a client library
    response = post_yaml(api, SHORTEST, URL + "?dryRun=true")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    error = api_error(response)
    assert "/srv/secret" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert error["problems"] == []


def test_a_field_of_the_wrong_type_is_a_422_in_the_same_shape(api):
    response = api.get("/api/v1/models/search?q=bge&limit=many")
    assert response.status_code == 422
    listed = problems(response)
    assert listed[0]["path"] == "query.limit"
    assert "limit" in api_error(response)["message"]


def test_a_write_without_any_credentials_is_401_not_a_csrf_403(client, db):
    response = post_yaml(client, SHORTEST)
    assert response.status_code == 401
    assert "Bearer" in api_error(response)["message"]


def test_a_logged_in_browser_without_the_csrf_token_still_gets_403(deployer):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(deployer.user)
    response = post_yaml(browser, SHORTEST)
    assert response.status_code == 403
    assert "CSRF" in api_error(response)["message"]


def test_a_body_over_the_upload_limit_is_a_json_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    response = post_yaml(api, "#" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))
    assert response.status_code == 413
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in api_error(response)["message"]


def test_a_missing_application_is_a_404_in_the_same_shape(api):
    response = api.get(f"{URL}/nothing-here")
    assert response.status_code == 404
    assert "nothing-here" in api_error(response)["message"]


def test_an_address_without_an_api_route_is_a_json_404(api):
    for url in ("/api/v1/nothing", "/api/v2/applications"):
        response = api.get(url)
        assert response.status_code == 404
        assert "openapi.json" in api_error(response)["message"]


def test_a_method_the_route_does_not_have_is_a_json_405(api):
    response = api.patch(URL)
    assert response.status_code == 405
    assert "PATCH" in api_error(response)["message"]
    assert "POST" in response["Allow"]


def test_pages_keep_their_own_error_pages(as_deployer):
    response = as_deployer.get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_a_viewer_is_refused_in_the_same_shape(client, viewer):
    client.defaults.update(bearer(viewer))
    response = post_yaml(client, SHORTEST)
    assert response.status_code == 403
    assert "viewer" in api_error(response)["message"]


def test_check_without_a_profile_among_several_is_400_naming_them(api, org):
    Profile.objects.create(
        organization=org, name="second", cluster=Cluster.objects.get(organization=org)
    )
    response = api.get("/api/v1/models/check?uri=hf://BAAI/bge-m3")
    assert response.status_code == 400
    message = api_error(response)["message"]
    assert "several profiles" in message and "second" in message
    named = api.get("/api/v1/models/check?uri=hf://BAAI/bge-m3&profile=second")
    assert named.status_code == 200, named.content


def test_check_in_an_organisation_without_profiles_is_still_404(api, org):
    Profile.objects.filter(organization=org).delete()
    response = api.get("/api/v1/models/check?uri=hf://BAAI/bge-m3")
    assert response.status_code == 404
    api_error(response)


# --- the OpenAPI document -----------------------------------------------------------------


@pytest.fixture
def document(client, db):
    return client.get("/api/v1/openapi.json").json()


def _error_ref(response: dict) -> str:
    return response["content"]["application/json"]["schema"]["$ref"]


def test_every_operation_declares_the_common_errors_with_the_error_schema(document):
    assert "ErrorOut" in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            expected = {"401", "403", "422", "500"}
            if "{" in path:
                expected.add("404")
            if method in ("post", "put", "patch"):
                expected.add("413")
            assert expected <= set(map(str, responses)), (method, path)
            for status in expected:
                declared = responses.get(status) or responses[int(status)]
                assert _error_ref(declared).endswith("/ErrorOut"), (method, path, status)


def test_route_specific_errors_are_declared(document):
    def statuses(path, method):
        return set(map(str, document["paths"][path][method]["responses"]))

    assert {"200", "201", "400", "409"} <= statuses("/api/v1/applications", "post")
    assert {"400", "503"} <= statuses("/api/v1/applications/{name}/restart", "post")
    assert {"204", "200", "503"} <= statuses("/api/v1/applications/{name}", "delete")
    assert {"400"} <= statuses("/api/v1/models/check", "get")


def test_the_request_body_describes_the_manifest(document):
    body = document["paths"]["/api/v1/applications"]["post"]["requestBody"]
    manifest = body["content"]["application/json"]["schema"]
    assert set(manifest["required"]) == {"apiVersion", "kind", "spec"}
    spec = manifest["properties"]["spec"]
    assert {"name", "profileName", "source"} <= set(spec["required"])
    model = spec["properties"]["source"]["properties"]["model"]
    assert model["properties"]["format"]["enum"][0] == "vLLM"
    scaling = model["properties"]["scaling"]["properties"]
    assert scaling["minReplicas"]["type"] == "integer" and scaling["minReplicas"]["minimum"] == 0
    assert manifest["properties"]["apiVersion"]["const"] == "servedeck.io/v1"
