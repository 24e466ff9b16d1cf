"""Medium 12: login is throttled per account and per address, password validators apply
wherever a password is set, members change their own password, and an admin gives a one-time
link that sets a new one."""

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from accesspolicies import members
from accesspolicies.models import Membership, Role
from accesspolicies.problems import Invalid
from tests.accesspolicies.counting_hasher import CountingHasher
from tests.helpers import client_for


@pytest.fixture
def counting(settings, deployer):
    """Every hash of a password counted, dan's stored one included."""
    settings.PASSWORD_HASHERS = ["tests.accesspolicies.counting_hasher.CountingHasher"]
    deployer.user.set_password("pw-dan")
    deployer.user.save()
    CountingHasher.runs = 0
    return CountingHasher


def login(client, username, password, address="10.0.0.1"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_wrong_passwords_lock_the_account_then_the_right_one_waits(client, deployer, counting):
    for _ in range(5):
        response = login(client, "dan", "wrong")
        assert response.status_code == 200
        assert "didn&#x27;t match" in response.content.decode()
    runs = counting.runs
    assert runs >= 5  # each wrong password was hashed
    response = login(client, "dan", "pw-dan")
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    text = response.content.decode()
    assert "Too many failed logins for this account: try again in 15 minutes" in text
    assert "password reset link" in text
    assert "_auth_user_id" not in client.session
    assert counting.runs == runs  # refused before any hashing


def test_the_account_lock_holds_from_another_address(client, deployer):
    for _ in range(5):
        login(client, "dan", "wrong", "10.0.0.1")
    assert login(client, "dan", "pw-dan", "10.9.9.9").status_code == 429


def test_a_flood_from_one_address_is_stopped_before_hashing(client, deployer, counting, settings):
    settings.SERVEDECK_LOGIN_FAILURES_PER_ADDRESS = 8
    for number in range(8):
        login(client, f"nobody{number}", "wrong")
    runs = counting.runs
    assert runs >= 8
    response = login(client, "someone-else", "wrong")
    assert response.status_code == 429
    assert "from your address" in response.content.decode()
    assert counting.runs == runs
    # another address is not affected
    assert login(client, "dan", "pw-dan", "10.0.0.2").status_code == 302


def test_a_right_password_clears_the_account_count(client, deployer):
    for _ in range(4):
        login(client, "dan", "wrong")
    assert login(client, "dan", "pw-dan").status_code == 302
    client.logout()
    for _ in range(4):
        login(client, "dan", "wrong")
    assert login(client, "dan", "pw-dan").status_code == 302


def test_the_count_ends_with_its_window(client, deployer, settings):
    settings.SERVEDECK_LOGIN_FAILURE_WINDOW = 1
    for _ in range(5):
        login(client, "dan", "wrong")
    assert login(client, "dan", "pw-dan").status_code == 429
    import time

    time.sleep(1.2)  # the cache entry expires; this is not a timing assertion
    assert login(client, "dan", "pw-dan").status_code == 302


# --- validators wherever a password is set -------------------------------------------------


def test_bootstrap_refuses_a_weak_admin_password(db, monkeypatch):
    monkeypatch.setenv("SERVEDECK_ADMIN_PASSWORD", "1")
    with pytest.raises(CommandError, match="SERVEDECK_ADMIN_PASSWORD is refused: .*too short"):
        call_command("bootstrap", stdout=StringIO())
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.exists()


def test_bootstrap_refuses_a_username_that_pages_cannot_carry(db, monkeypatch):
    monkeypatch.delenv("SERVEDECK_ADMIN_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="not a valid username"):
        call_command("bootstrap", "--admin", "o'brien", stdout=StringIO())


def test_a_new_member_needs_a_valid_username_and_password(admin):
    _, link = members.invite(admin.organization, Role.VIEWER, actor=admin)
    with pytest.raises(Invalid, match="not a username"):
        members.sign_up(link, "a/b", "a long enough passphrase")
    with pytest.raises(Invalid) as weak:
        members.sign_up(link, "dana", "1")
    assert weak.value.field == "password"


# --- changing one's own password ------------------------------------------------------------


def test_a_member_changes_their_password(deployer):
    browser = client_for(deployer)
    page = browser.get(reverse("password-change"))
    assert page.status_code == 200
    assert "Change password" in page.content.decode()
    weak = browser.post(
        reverse("password-change"),
        {"old_password": "pw-dan", "new_password1": "123", "new_password2": "123"},
    )
    assert weak.status_code == 200
    assert "too short" in weak.content.decode()
    done = browser.post(
        reverse("password-change"),
        {
            "old_password": "pw-dan",
            "new_password1": "a quiet harbour 77",
            "new_password2": "a quiet harbour 77",
        },
        follow=True,
    )
    assert "Password changed" in done.content.decode()
    assert authenticate(username="dan", password="a quiet harbour 77")


def test_the_topbar_links_to_change_password(as_viewer):
    assert reverse("password-change") in as_viewer.get("/").content.decode()


def test_password_change_needs_login(client, db):
    response = client.get(reverse("password-change"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


# --- an admin's one-time link ---------------------------------------------------------------


def link_url(username):
    return reverse("accesspolicies:member-password-link", args=[username])


def test_admin_gives_a_one_time_link_that_sets_a_new_password(as_admin, deployer):
    posted = as_admin.post(link_url("dan"))
    members = reverse("accesspolicies:members")
    assert posted.status_code == 302 and posted["Location"] == members  # reload: no 2nd link
    page = as_admin.get(members)
    assert page["Cache-Control"].startswith("max-age=0")
    assert "A password link for dan" in page.content.decode()
    link = re.search(r'<code id="shown-once">([^<]+)</code>', page.content.decode()).group(1)
    assert link not in as_admin.get(members).content.decode()  # shown once
    assert link.startswith("http://testserver/password/set/")
    anonymous = Client()
    form = anonymous.get(link, follow=True)
    assert "Set a new password" in form.content.decode()
    set_url = form.redirect_chain[-1][0]
    weak = anonymous.post(set_url, {"new_password1": "dan", "new_password2": "dan"})
    assert "too short" in weak.content.decode() or "too similar" in weak.content.decode()
    done = anonymous.post(
        set_url,
        {"new_password1": "lantern orchard 42", "new_password2": "lantern orchard 42"},
        follow=True,
    )
    assert "Your new password is set" in done.content.decode()
    assert authenticate(username="dan", password="lantern orchard 42")
    again = Client().get(link, follow=True)
    assert "This link does not work" in again.content.decode()


def test_the_members_page_offers_the_link(as_admin, deployer):
    assert link_url("dan") in as_admin.get(reverse("accesspolicies:members")).content.decode()


@pytest.mark.parametrize("who", ["as_deployer", "as_viewer"])
def test_only_admins_reset(request, who, admin, deployer):
    assert request.getfixturevalue(who).post(link_url("ada")).status_code == 403


def test_outsiders_and_non_members_are_not_found(as_outsider, as_admin, deployer):
    assert as_outsider.post(link_url("dan")).status_code == 404
    assert as_admin.post(link_url("nobody")).status_code == 404


def test_no_reset_of_a_member_of_an_organisation_the_admin_does_not_run(
    as_admin, deployer, other_org
):
    Membership.objects.create(organization=other_org, user=deployer.user, role=Role.VIEWER)
    response = as_admin.post(link_url("dan"))
    assert response.status_code == 403
    assert "organisations you do not administer" in response.content.decode()


def test_no_reset_of_oneself_or_an_operator(as_admin, admin, deployer):
    assert as_admin.post(link_url("ada")).status_code == 403
    deployer.user.is_superuser = True
    deployer.user.save()
    assert "operator account" in as_admin.post(link_url("dan")).content.decode()


def test_reset_link_is_a_post(as_admin, deployer):
    assert as_admin.get(link_url("dan")).status_code == 405
