"""GET /api/v1/applications/<name>/usage and /api/v1/keys/<name>/usage: every member may read
an application's, admins a key's (tests/accesspolicies/test_key_usage_is_admins.py), with a
token or a session; outsiders get 404, the span is bounded, figures come from the rows."""

from datetime import UTC, datetime, timedelta

import pytest

from accesspolicies.models import APIKey
from jobs.gateway.metering import Meter, RequestRecord
from jobs.models import Application
from tests.helpers import api_error, bearer


def make_application(org, name="chat"):
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}
    )


def make_key(org, name="support-bot"):
    return APIKey.objects.create(
        organization=org, name=name, lookup=name[:12], secret_hash="0" * 64
    )


@pytest.fixture
def traffic(org):
    """chat: 9 fast requests by support-bot, 1 slow 502 by another key, one 404 two minutes
    ago; embed: one request by support-bot."""
    chat, embed = make_application(org), make_application(org, "embed")
    key, other = make_key(org), make_key(org, "batch-job")
    now = datetime.now(UTC)
    meter = Meter(announce=False)

    def record(app, api_key, at=now, **fields):
        fields = {"status": 200, "latency_ms": 8.0} | fields
        meter.record(
            RequestRecord(
                at=at.timestamp(),
                organization_id=org.pk,
                application_id=app.pk,
                api_key_id=api_key.pk,
                **fields,
            )
        )

    for _ in range(9):
        record(chat, key, prompt_tokens=10, completion_tokens=20)
    record(chat, other, status=502, latency_ms=800.0)
    record(chat, key, at=now - timedelta(minutes=2), status=404)
    record(embed, key, prompt_tokens=5)
    meter.flush()
    return chat, key


def test_application_usage_per_minute_with_totals(as_viewer, traffic):
    response = as_viewer.get("/api/v1/applications/chat/usage?minutes=5")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == "chat" and body["minutes"] == 5
    assert len(body["rows"]) == 5
    assert [row["requests"] for row in body["rows"]][-3:] in ([1, 0, 10], [0, 1, 0])
    totals = body["totals"]
    assert (totals["requests"], totals["errors4xx"], totals["errors5xx"]) == (11, 1, 1)
    assert (totals["promptTokens"], totals["completionTokens"]) == (90, 180)
    assert 5 < totals["latencyP50Ms"] <= 10 and 500 < totals["latencyP95Ms"] <= 1000
    assert set(body["rows"][0]) == {"minute", *totals}
    assert datetime.fromisoformat(body["until"]) - datetime.fromisoformat(body["since"]) == (
        timedelta(minutes=5)
    )


def test_the_default_span_is_an_hour(as_viewer, traffic):
    body = as_viewer.get("/api/v1/applications/chat/usage").json()
    assert body["minutes"] == 60 and len(body["rows"]) == 60


def test_key_usage_sums_its_applications(as_admin, traffic):
    response = as_admin.get("/api/v1/keys/support-bot/usage?minutes=10")
    assert response.status_code == 200, response.content
    totals = response.json()["totals"]
    assert (totals["requests"], totals["errors4xx"], totals["promptTokens"]) == (11, 1, 95)
    assert as_admin.get("/api/v1/keys/batch-job/usage").json()["totals"]["errors5xx"] == 1


def test_with_a_token_too(client, admin, traffic):
    response = client.get("/api/v1/keys/support-bot/usage", **bearer(admin))
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "url", ["/api/v1/applications/chat/usage", "/api/v1/keys/support-bot/usage"]
)
def test_outsiders_get_404(as_outsider, traffic, url):
    response = as_outsider.get(url)
    assert response.status_code == 404
    assert "acme" not in response.content.decode().lower()  # names their own organisation only


@pytest.mark.parametrize(
    "url", ["/api/v1/applications/nothing/usage", "/api/v1/keys/nothing/usage"]
)
def test_unknown_names_get_404_naming_them(as_admin, traffic, url):
    response = as_admin.get(url)
    assert response.status_code == 404
    assert "'nothing'" in api_error(response)["message"]


def test_anonymous_callers_get_401(client, traffic):
    assert client.get("/api/v1/applications/chat/usage").status_code == 401


@pytest.mark.parametrize("minutes", ["0", "1441", "-5", "many"])
def test_the_span_is_bounded(as_viewer, traffic, minutes):
    response = as_viewer.get(f"/api/v1/applications/chat/usage?minutes={minutes}")
    assert response.status_code == 422
    assert "minutes" in response.content.decode()


def test_the_longest_span_answers(as_viewer, traffic):
    body = as_viewer.get("/api/v1/applications/chat/usage?minutes=1440").json()
    assert len(body["rows"]) == 1440 and body["totals"]["requests"] == 11


def test_an_application_of_the_same_name_elsewhere_is_not_counted(as_outsider, traffic, other_org):
    make_application(other_org, "chat")
    body = as_outsider.get("/api/v1/applications/chat/usage").json()
    assert body["totals"]["requests"] == 0


def test_an_applications_usage_of_one_model_id_its_own_or_an_adapters(as_viewer, org):
    chat = make_application(org)
    chat.manifest = {"spec": {"source": {"model": {"adapters": [{"name": "support"}]}}}}
    chat.save()
    meter = Meter(announce=False)
    now = datetime.now(UTC).timestamp()
    for adapter, tokens in (("", 3), ("support", 5), ("support", 7)):
        meter.record(
            RequestRecord(
                at=now, organization_id=org.pk, application_id=chat.pk, status=200,
                latency_ms=5.0, prompt_tokens=tokens, adapter=adapter,
            )
        )  # fmt: skip
    meter.flush()
    url = "/api/v1/applications/chat/usage?minutes=5"
    assert as_viewer.get(url).json()["totals"]["requests"] == 3
    support = as_viewer.get(url + "&model=support").json()
    assert support["name"] == "support"
    assert (support["totals"]["requests"], support["totals"]["promptTokens"]) == (2, 12)
    own = as_viewer.get(url + "&model=chat").json()
    assert (own["totals"]["requests"], own["totals"]["promptTokens"]) == (1, 3)
    refused = as_viewer.get(url + "&model=legal")
    assert refused.status_code == 400
    assert "accepts chat, support" in api_error(refused)["message"]
