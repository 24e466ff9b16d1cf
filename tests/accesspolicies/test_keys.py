"""API keys: made by admins on every surface, the secret shown once and stored as a hash,
limits and applications checked, revoke and rotate with a grace period, each change audited."""

import hashlib
import json
from datetime import timedelta

import pytest
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone
from servedeck import present

from accesspolicies import keys
from accesspolicies.models import APIKey, AuditEntry, ChangeCounter
from accesspolicies.problems import Invalid
from accesspolicies.secrets import API_KEY, digest
from tests.accesspolicies.conftest import make_application, run
from tests.helpers import bearer, problems

# --- the verbs ---------------------------------------------------------------------------


def test_a_key_is_stored_only_as_its_hash(org, admin):
    key, plain = keys.create(org, "support-bot", actor=admin)
    assert plain.startswith("sdk_") and len(plain) > 40
    stored = APIKey.objects.get(pk=key.pk)
    assert API_KEY.lookup_of(plain) == stored.lookup
    assert stored.secret_hash == hashlib.sha256(plain.encode()).hexdigest()
    every_value = [str(v) for v in APIKey.objects.filter(pk=key.pk).values().get().values()]
    assert not any(plain in value for value in every_value)
    assert stored.all_applications and stored.created_by == admin.user


def test_applications_limits_and_expiry_are_kept(org, admin):
    make_application(org, "chat")
    make_application(org, "embed")
    key, _ = keys.create(org, "bot", ["chat", "chat", "embed"], 60, "1000", 4, 30, actor=admin)
    key.refresh_from_db()
    assert not key.all_applications and key.applications == ["chat", "embed"]
    assert (key.requests_per_minute, key.tokens_per_minute, key.concurrent_requests) == (
        60,
        1000,
        4,
    )
    assert timedelta(days=29) < key.expires_at - timezone.now() <= timedelta(days=30)


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"name": "Support Bot"}, "name", "is not a key name; accepts 1 to 63 lowercase"),
        ({"name": "x" * 500}, "name", "…"),
        ({"name": "-bot"}, "name", "starting and ending with a letter or digit"),
        ({"applications": ["nope"]}, "applications", "'nope' is not an application of Acme"),
        ({"applications": ["a"] * 101}, "applications", "accepts at most 100"),
        ({"rpm": 0}, "requestsPerMinute", "0 is out of range; accepts 1 to 1000000"),
        ({"tpm": "lots"}, "tokensPerMinute", "'lots' is not a whole number"),
        ({"concurrency": 10_001}, "concurrentRequests", "accepts 1 to 10000"),
        ({"expires_in": 0}, "expiresInDays", "accepts 1 to 3650 days"),
    ],
)
def test_bad_input_names_the_field_the_value_and_what_is_accepted(org, admin, kwargs, field, words):
    kwargs = {"name": "bot", **kwargs}
    with pytest.raises(Invalid) as raised:
        keys.create(org, actor=admin, **kwargs)
    assert raised.value.field == field
    assert words in raised.value.message
    assert len(raised.value.message) < 400  # the value is bounded, never echoed whole
    assert not APIKey.objects.exists()


def test_an_application_of_another_organisation_is_refused(org, other_org, admin):
    make_application(other_org, "secret-app")
    with pytest.raises(Invalid, match="'secret-app' is not an application of Acme"):
        keys.create(org, "bot", ["secret-app"], actor=admin)


def test_the_same_name_twice_is_a_conflict(org, admin):
    keys.create(org, "bot", actor=admin)
    with pytest.raises(Invalid) as raised:
        keys.create(org, "bot", actor=admin)
    assert raised.value.status == 409 and "rotate bot" in raised.value.message


def test_only_admins_make_keys(org, deployer, outsider):
    from django.core.exceptions import PermissionDenied
    from django.http import Http404

    with pytest.raises(PermissionDenied):
        keys.create(org, "bot", actor=deployer)
    with pytest.raises(Http404):
        keys.create(org, "bot", actor=outsider)


def test_rotate_keeps_the_old_secret_for_the_grace_period(org, admin):
    key, old = keys.create(org, "bot", actor=admin)
    key, new = keys.rotate(key, 15, actor=admin)
    key.refresh_from_db()
    assert new != old
    assert key.lookup == API_KEY.lookup_of(new) and key.secret_hash == digest(new)
    assert key.previous_lookup == API_KEY.lookup_of(old)
    assert key.previous_secret_hash == digest(old)
    left = key.previous_expires_at - timezone.now()
    assert timedelta(minutes=14) < left <= timedelta(minutes=15)
    assert keys.state(key) == "rotating"


def test_revoke_ends_the_old_secret_too_and_cannot_be_rotated(org, admin):
    key, _ = keys.create(org, "bot", actor=admin)
    keys.rotate(key, 60, actor=admin)
    assert keys.revoke(key, actor=admin)
    key.refresh_from_db()
    assert key.revoked_at and key.previous_expires_at <= timezone.now()
    assert keys.state(key) == "revoked"
    assert not keys.revoke(key, actor=admin)  # twice: nothing more happens
    with pytest.raises(Invalid, match="revoked key cannot be rotated"):
        keys.rotate(key, 5, actor=admin)


def test_every_change_bumps_the_gateways_counter_and_is_audited(org, admin):
    before = ChangeCounter.read()
    key, _ = keys.create(org, "bot", rpm=10, actor=admin)
    keys.rotate(key, 5, actor=admin)
    keys.revoke(key, actor=admin)
    assert ChangeCounter.read() >= before + 3
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "object_name"))
    assert actions == [("apikey.create", "bot"), ("apikey.rotate", "bot"), ("apikey.revoke", "bot")]
    created = AuditEntry.objects.get(action="apikey.create")
    assert created.actor == admin.user and created.detail["requests_per_minute"] == 10
    assert not any(key.secret_hash in json.dumps(e.detail) for e in AuditEntry.objects.all())


# --- the pages ---------------------------------------------------------------------------


def test_create_shows_the_secret_once_after_the_redirect(as_admin, admin):
    response = as_admin.post(reverse("accesspolicies:key-create"), {"name": "bot"})
    assert response.status_code == 302
    page = as_admin.get(response["Location"])
    text = page.content.decode()
    plain = text.split('id="shown-once">')[1].split("<")[0]
    key = APIKey.objects.get(name="bot")
    assert key.secret_hash == digest(plain)
    assert "shown once" in text and page["Cache-Control"].startswith("max-age=0")
    again = as_admin.get(reverse("accesspolicies:keys")).content.decode()
    assert plain not in again and key.masked in again


def test_the_keys_table_shows_last_used_and_usage_columns(as_admin, org, admin):
    key, _ = keys.create(org, "bot", actor=admin)
    APIKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    page = as_admin.get(reverse("accesspolicies:keys")).content.decode()
    for heading in ("Last used", "Requests (24 h)", "Tokens (24 h)", "May call", "Rotate"):
        assert heading in page
    assert "data-confirm=" in page and "onsubmit" not in page


def test_usage_counts_the_last_day_of_metered_minutes_per_key(org, admin):
    from jobs.models import UsageMinute

    bot, _ = keys.create(org, "bot", actor=admin)
    idle, _ = keys.create(org, "idle", actor=admin)
    now = timezone.now().replace(second=0, microsecond=0)
    for minutes_ago, requests in ((1, 3), (60, 4), (60 * 25, 100)):
        UsageMinute.objects.create(
            minute=now - timedelta(minutes=minutes_ago),
            scope=f"k{bot.pk}.{minutes_ago}",
            organization=org,
            api_key=bot,
            requests=requests,
            prompt_tokens=10 * requests,
            completion_tokens=requests,
        )
    listed, usage = keys.listing(org, actor=admin)
    assert {k.name for k in listed} == {"bot", "idle"}
    assert usage[bot.pk] == keys.Usage(requests=7, tokens=77)
    assert idle.pk not in usage


def test_a_bad_form_keeps_what_was_typed_and_names_the_problem(as_admin, org):
    make_application(org, "chat")
    response = as_admin.post(
        reverse("accesspolicies:key-create"), {"name": "Bad Name", "requests_per_minute": "5"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "is not a key name" in page and 'value="5"' in page
    assert not APIKey.objects.exists()


def test_revoke_and_rotate_from_the_page(as_admin, org, admin):
    key, _ = keys.create(org, "bot", actor=admin)
    response = as_admin.post(
        reverse("accesspolicies:key-rotate", args=["bot"]), {"grace_minutes": "5"}
    )
    assert response.status_code == 302
    page = as_admin.get(response["Location"]).content.decode()
    new = page.split('id="shown-once">')[1].split("<")[0]
    assert APIKey.objects.get(pk=key.pk).secret_hash == digest(new)
    as_admin.post(reverse("accesspolicies:key-revoke", args=["bot"]))
    assert APIKey.objects.get(pk=key.pk).revoked_at is not None


def test_the_audit_entry_has_the_request_address(as_admin, admin):
    as_admin.post(reverse("accesspolicies:key-create"), {"name": "bot"}, REMOTE_ADDR="10.1.2.3")
    entry = AuditEntry.objects.get(action="apikey.create")
    assert entry.address == "10.1.2.3" and entry.detail["via"] == "web"


@pytest.mark.parametrize(
    "name, args, method",
    [
        ("keys", [], "get"),
        ("key-create", [], "post"),
        ("key-revoke", ["bot"], "post"),
        ("key-rotate", ["bot"], "post"),
    ],
)
def test_deployers_and_viewers_get_403_outsiders_404(
    org, admin, as_deployer, as_viewer, as_outsider, name, args, method
):
    key, plain = keys.create(org, "bot", actor=admin)
    url = reverse(f"accesspolicies:{name}", args=args)
    for client in (as_deployer, as_viewer):
        assert getattr(client, method)(url, {"name": "x"}).status_code == 403
    status = getattr(as_outsider, method)(url, {"name": "x"}).status_code
    assert status == (404 if args else 200 if method == "get" else 302)
    key.refresh_from_db()
    assert key.revoked_at is None and key.secret_hash == digest(plain)
    assert not APIKey.objects.filter(organization=org, name="x").exists()


# --- the REST API ------------------------------------------------------------------------


def test_api_create_shows_the_key_once_then_list_and_get(api, org):
    make_application(org, "chat")
    body = {"name": "bot", "applications": ["chat"], "requestsPerMinute": 60}
    response = api.post("/api/v1/keys", body, content_type="application/json")
    assert response.status_code == 201
    created = response.json()
    assert created["key"].startswith("sdk_") and created["applications"] == ["chat"]
    assert APIKey.objects.get(name="bot").secret_hash == digest(created["key"])
    listed = api.get("/api/v1/keys").json()
    assert [k["name"] for k in listed] == ["bot"] and "key" not in listed[0]
    got = api.get("/api/v1/keys/bot").json()
    assert got["requestsPerMinute"] == 60 and got["state"] == "active" and "key" not in got


def test_api_rotate_and_revoke(api, org, admin):
    _, old = keys.create(org, "bot", actor=admin)
    rotated = api.post(
        "/api/v1/keys/bot/rotate", {"graceMinutes": 0}, content_type="application/json"
    ).json()
    assert rotated["key"] != old and rotated["state"] == "active"
    for default in (
        api.post("/api/v1/keys/bot/rotate"),
        api.post("/api/v1/keys/bot/rotate", content_type="application/json"),
    ):
        assert default.status_code == 200 and default.json()["previousExpiresAt"]
    bad = api.post("/api/v1/keys/bot/rotate", "{nope", content_type="application/json")
    assert bad.status_code == 400 and problems(bad)[0]["path"] == "graceMinutes"
    revoked = api.post("/api/v1/keys/bot/revoke").json()
    assert revoked["state"] == "revoked"


def test_api_errors_name_the_field(api, org):
    response = api.post(
        "/api/v1/keys", {"name": "bot", "applications": ["nope"]}, content_type="application/json"
    )
    assert response.status_code == 400
    assert problems(response)[0]["path"] == "applications"
    api.post("/api/v1/keys", {"name": "bot"}, content_type="application/json")
    again = api.post("/api/v1/keys", {"name": "bot"}, content_type="application/json")
    assert again.status_code == 409


def test_api_is_for_admins_only(client, org, admin, deployer, viewer, outsider):
    keys.create(org, "bot", actor=admin)
    for member in (deployer, viewer):
        headers = bearer(member)
        assert client.get("/api/v1/keys", **headers).status_code == 403
        created = client.post(
            "/api/v1/keys", {"name": "x"}, content_type="application/json", **headers
        )
        assert created.status_code == 403
        assert client.post("/api/v1/keys/bot/revoke", **headers).status_code == 403
    headers = bearer(outsider)
    assert client.get("/api/v1/keys/bot", **headers).status_code == 404
    assert client.post("/api/v1/keys/bot/revoke", **headers).status_code == 404
    assert client.get("/api/v1/keys", **headers).json() == []
    assert APIKey.objects.get(name="bot").revoked_at is None


# --- the command line --------------------------------------------------------------------


def test_cli_create_prints_the_secret_once_and_json_has_name_and_key(admin, org):
    make_application(org, "chat")
    out, err = run("apikey", "create", "bot", "--app", "chat", "--rpm", "60", "--expires-in", "7")
    plain = out.splitlines()[-1]
    key = APIKey.objects.get(name="bot")
    assert key.secret_hash == digest(plain) and "shown once" in err
    assert key.applications == ["chat"] and key.requests_per_minute == 60
    out, _ = run("apikey", "create", "other", "--json")
    data = json.loads(out)
    assert (
        data["name"] == "other"
        and digest(data["key"]) == APIKey.objects.get(name="other").secret_hash
    )
    entry = AuditEntry.objects.filter(action="apikey.create").first()
    assert entry.actor_name == "ada (cli)" and entry.address is None
    assert entry.detail["via"] == "cli"


def test_cli_list_revoke_rotate(admin, org):
    run("apikey", "create", "bot")
    out, _ = run("apikey", "rotate", "bot", "--grace", "10")
    assert "rotated" in out and out.splitlines()[-1].startswith("sdk_")
    listing, _ = run("apikey", "list")
    assert listing.splitlines()[0].split()[:3] == ["NAME", "KEY", "APPLICATIONS"]
    assert "rotating" in listing
    out, _ = run("apikey", "revoke", "bot")
    assert out.strip() == "apikey/bot revoked"
    assert json.loads(run("apikey", "list", "--json")[0])[0]["state"] == "revoked"


@pytest.mark.parametrize(
    "args, words",
    [
        (["apikey", "create", "bot", "--rpm", "0"], "--rpm: 0 is out of range"),
        (["apikey", "create", "bot", "--app", "nope"], "--app: 'nope' is not an application"),
        (["apikey", "create", "Bad/Name"], "NAME: 'Bad/Name' is not a key name"),
        (["apikey", "rotate", "ghost"], "no API key named 'ghost'"),
        (["apikey", "rotate", "bot", "--grace", "-1"], "--grace: -1 is out of range"),
    ],
)
def test_cli_errors_exit_1_naming_the_option(admin, org, args, words):
    run("apikey", "create", "bot")
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert raised.value.returncode == 1 and words in str(raised.value)


def test_cli_refuses_a_member_who_is_not_admin(admin, deployer):
    with pytest.raises(CommandError, match="may not administer API keys"):
        run("apikey", "create", "bot", "--user", "dan")
    assert not APIKey.objects.exists()


@pytest.mark.parametrize("sort", ["last_used_at", "-expires_at", "name", "-state", "bogus"])
def test_the_keys_table_sorts_with_empty_cells(as_admin, org, admin, sort):
    used, _ = keys.create(org, "used", actor=admin)
    keys.create(org, "never", expires_in=3, actor=admin)
    APIKey.objects.filter(pk=used.pk).update(last_used_at=timezone.now())
    response = as_admin.get(reverse("accesspolicies:keys"), {"sort": sort})
    assert response.status_code == 200
    page = response.content.decode()
    assert ">used</td>" in page and ">never</td>" in page


def test_cli_json_is_the_apis_answer_printed_as_the_client_prints_it(admin, org, client):
    make_application(org, "chat")
    run("apikey", "create", "bot", "--rpm", "60", "--app", "chat", "--expires-in", "3")
    out, _ = run("apikey", "list", "--json")
    answer = client.get("/api/v1/keys", **bearer(admin)).json()
    assert out == present.dump(answer, "json") + "\n"  # servedeck key list --json
    made = json.loads(run("apikey", "create", "other", "--json")[0])
    assert list(made) == [*answer[0], "key"]
    rotated = json.loads(run("apikey", "rotate", "bot", "--json")[0])
    assert list(rotated) == list(made) and rotated["previousExpiresAt"].endswith("Z")
