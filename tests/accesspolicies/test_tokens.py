"""Personal access tokens: shown once, stored as a hash, revoked by their owner only."""

import hashlib
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accesspolicies.models import PersonalAccessToken


def test_a_token_is_stored_only_as_a_hash(deployer):
    token, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    assert plain.startswith("sdp_") and len(plain) > 40
    stored = PersonalAccessToken.objects.get(pk=token.pk)
    assert plain not in (stored.lookup, stored.secret_hash, str(stored))
    assert stored.secret_hash == hashlib.sha256(plain.encode()).hexdigest()
    assert PersonalAccessToken.objects.authenticate(plain) == token


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # wrong secret, right lookup
        lambda t: "sdp_" + "0" * 12 + t[16:],  # unknown lookup
        lambda t: t.replace("sdp_", "xyz_"),  # wrong prefix
        lambda t: "",
    ],
    ids=["wrong-secret", "unknown", "prefix", "empty"],
)
def test_wrong_tokens_are_refused_the_same_way(deployer, mangle):
    _, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    assert PersonalAccessToken.objects.authenticate(mangle(plain)) is None


def test_expired_and_revoked_tokens_are_refused(deployer):
    token, plain = PersonalAccessToken.issue(
        deployer.user, deployer.organization, "old", timezone.now() - timedelta(seconds=1)
    )
    assert PersonalAccessToken.objects.authenticate(plain) is None
    token, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    token.revoke()
    assert PersonalAccessToken.objects.authenticate(plain) is None


def test_last_used_is_recorded_but_not_on_every_call(deployer):
    token, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    PersonalAccessToken.objects.authenticate(plain)
    first = PersonalAccessToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    PersonalAccessToken.objects.authenticate(plain)
    assert PersonalAccessToken.objects.get(pk=token.pk).last_used_at == first


def test_create_redirects_and_shows_the_token_once(as_deployer, deployer):
    url = reverse("accesspolicies:tokens")
    response = as_deployer.post(
        reverse("accesspolicies:token-create"), {"name": "ci", "expires_in_days": 30}
    )
    assert response.status_code == 302 and response["Location"] == url  # a reload makes none
    shown = as_deployer.get(url)
    page = shown.content.decode()
    token = PersonalAccessToken.objects.get(user=deployer.user)
    assert "shown once" in page and token.masked in page
    secret = re.search(r'<code id="shown-once">([^<]+)</code>', page).group(1)
    assert PersonalAccessToken.objects.authenticate(secret) == token
    assert shown["Cache-Control"].startswith("max-age=0")
    again = as_deployer.get(url).content.decode()
    assert token.masked in again and "shown once" not in again and secret not in again
    assert PersonalAccessToken.objects.filter(user=deployer.user).count() == 1


def test_create_with_a_bad_name_answers_400_with_the_form(as_deployer, deployer):
    response = as_deployer.post(reverse("accesspolicies:token-create"), {"name": ""})
    assert response.status_code == 400
    assert not PersonalAccessToken.objects.filter(user=deployer.user).exists()


def test_owner_revokes_and_nobody_else_can(as_deployer, deployer, admin, as_admin):
    token, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    url = reverse("accesspolicies:token-revoke", args=[token.lookup])
    assert as_admin.post(url).status_code == 404  # not the admin's token either
    assert as_deployer.post(url).status_code == 302
    assert PersonalAccessToken.objects.authenticate(plain) is None


def test_a_token_stops_working_when_its_owner_leaves(client, deployer):
    _, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    deployer.delete()
    response = client.get("/api/v1/applications", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert response.status_code == 401


def test_switching_organisation(admin, outsider, as_admin, other_org):
    from accesspolicies.models import Membership

    Membership.objects.create(organization=other_org, user=admin.user, role="viewer")
    page = as_admin.get("/").content.decode()
    assert "Globex" in page  # offered in the switcher
    response = as_admin.post(reverse("console:switch-organization"), {"organization": "globex"})
    assert response.status_code == 302
    assert 'class="role"' in as_admin.get("/").content.decode()
    assert ">viewer<" in as_admin.get("/").content.decode()
    response = as_admin.post(reverse("console:switch-organization"), {"organization": "initech"})
    assert response.status_code == 404


def test_login_and_logout(client, admin):
    response = client.post(reverse("login"), {"username": "ada", "password": "wrong"})
    assert "didn&#x27;t match" in response.content.decode()
    response = client.post(reverse("login"), {"username": "ada", "password": "pw-ada"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    client.post(reverse("logout"))
    assert client.get("/").status_code == 302


# --- the command line --------------------------------------------------------------------


def test_cli_token_create_list_revoke_for_a_member(client, admin, deployer):
    import json

    from tests.accesspolicies.conftest import run

    out, err = run("token", "create", "ci", "--user", "dan", "--expires-in", "30", "--json")
    data = json.loads(out)
    assert data["name"] == "ci" and data["token"].startswith("sdp_")
    token = PersonalAccessToken.objects.get(name="ci")
    assert token.user == deployer.user
    assert token.secret_hash == hashlib.sha256(data["token"].encode()).hexdigest()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {data['token']}"}
    assert client.get("/api/v1/applications", **headers).status_code == 200
    listing, _ = run("token", "list", "--user", "dan")
    assert "ci" in listing and "active" in listing and data["token"] not in listing
    assert run("token", "list")[0].count("\n") == 1  # ada (the default) has none: header only
    out, _ = run("token", "revoke", "ci", "--user", "dan")
    assert out.strip() == "token/ci revoked"
    assert client.get("/api/v1/applications", **headers).status_code == 401


def test_cli_token_errors_exit_1(admin):
    from django.core.management.base import CommandError

    from tests.accesspolicies.conftest import run

    for args, words in (
        (["token", "create", "ci", "--expires-in", "400"], "--expires-in: 400 is out of range"),
        (["token", "revoke", "ghost"], "no live token named 'ghost'"),
        (["token", "create", "ci", "--user", "nobody"], "--user nobody: not a member"),
    ):
        with pytest.raises(CommandError) as raised:
            run(*args)
        assert words in str(raised.value)
    assert not PersonalAccessToken.objects.exists()
