"""Issue 21, finding 14: an API key's usage is an admin's business, as the key itself is.
`GET /api/v1/keys/<name>/usage` answered viewers and deployers 200 for a key and 404 for a name
that is none (telling which key names exist) while `GET /api/v1/keys/<name>` refused them:
both now follow one rule, and a refused role learns nothing about which names exist."""

import pytest

from accesspolicies.models import APIKey
from tests.helpers import api_error, bearer


@pytest.fixture
def key(org):
    return APIKey.objects.create(organization=org, name="support-bot", lookup="0123456789ab")


@pytest.mark.parametrize("who", ["as_deployer", "as_viewer"])
def test_a_keys_usage_is_refused_to_roles_that_may_not_see_the_key(request, who, key):
    browser = request.getfixturevalue(who)
    known = browser.get("/api/v1/keys/support-bot/usage")
    unknown = browser.get("/api/v1/keys/nothing-such/usage")
    assert known.status_code == unknown.status_code == 403
    assert api_error(known)["message"] == api_error(unknown)["message"]
    assert "API keys" in api_error(known)["message"]


def test_with_a_token_too(client, viewer, key):
    assert client.get("/api/v1/keys/support-bot/usage", **bearer(viewer)).status_code == 403


@pytest.mark.parametrize("who", ["as_admin", "as_deployer", "as_viewer", "as_outsider"])
@pytest.mark.parametrize("name", ["support-bot", "nothing-such"])
def test_a_key_and_its_usage_answer_every_persona_alike(request, who, name, key):
    browser = request.getfixturevalue(who)
    itself = browser.get(f"/api/v1/keys/{name}")
    usage = browser.get(f"/api/v1/keys/{name}/usage")
    assert itself.status_code == usage.status_code, (itself.content, usage.content)


def test_an_admin_reads_a_keys_usage(as_admin, key):
    response = as_admin.get("/api/v1/keys/support-bot/usage?minutes=5")
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "support-bot" and len(response.json()["rows"]) == 5
