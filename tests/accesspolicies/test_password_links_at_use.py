"""Issue 21, finding 5: an admin's password link sets a member's password only while that
admin may reset it. The rule (the member is in no organisation the admin does not administer,
the admin is still an admin, the member still a member) was checked only when the link was
made: a member who joined another organisation as its admin could still have their password
set by the old link. It is checked at each use now; making, using and a refused use of a link
are audited, and the audit log never holds the link."""

import re

import pytest
from django.contrib.auth import authenticate
from django.test import Client
from django.urls import reverse

from accesspolicies import members
from accesspolicies.models import AuditEntry, Role
from tests.helpers import client_for, make_member

NEW = "lantern orchard 42"


@pytest.fixture
def dan_password(deployer):
    deployer.user.set_password("pw-dan")
    deployer.user.save()
    return "pw-dan"


def make_link(as_admin, username="dan") -> str:
    """The link the members page shows once, after the admin asked for one."""
    posted = as_admin.post(reverse("accesspolicies:member-password-link", args=[username]))
    assert posted.status_code == 302, posted.content
    page = as_admin.get(reverse("accesspolicies:members")).content.decode()
    return re.search(r'<code id="shown-once">([^<]+)</code>', page).group(1)


def open_link(link: str):
    """Someone (the member) opens the link: the form to set a password, or why not."""
    browser = Client()
    page = browser.get(link, follow=True)
    return browser, page


def set_password(browser, page):
    return browser.post(
        page.redirect_chain[-1][0], {"new_password1": NEW, "new_password2": NEW}, follow=True
    )


@pytest.fixture
def dan_signed_in(deployer, dan_password):
    """dan's browser, signed in before any link is made (signing in changes what a reset token
    is derived from, which would end the link for a reason of its own)."""
    browser = Client()
    browser.force_login(deployer.user)
    return browser


def join_as_admin_elsewhere(dan_signed_in, outsider):
    """dan accepts an invitation of globex's admin to join globex as an admin, on its page."""
    _, token = members.invite(outsider.organization, Role.ADMIN, actor=outsider)
    joined = dan_signed_in.post(reverse("accesspolicies:join", args=[token]))
    assert joined.status_code == 302, joined.content


def test_a_link_made_before_the_member_joined_another_organisation_no_longer_works(
    as_admin, org, dan_signed_in, outsider, dan_password
):
    link = make_link(as_admin)
    join_as_admin_elsewhere(dan_signed_in, outsider)
    _, page = open_link(link)
    text = page.content.decode()
    assert "This link does not work" in text
    assert "organisations ada does not administer" in text
    assert "new_password1" not in text  # no form
    assert authenticate(username="dan", password=dan_password)
    refused = AuditEntry.objects.get(action="member.password-link-refused")
    assert refused.organization == org
    assert refused.object_name == "dan" and refused.actor is None
    assert refused.detail["linkBy"] == "ada"


def test_a_role_change_between_opening_the_form_and_sending_it_is_caught(
    as_admin, dan_signed_in, outsider, dan_password
):
    """The form was opened while the link still worked; the password is sent after dan
    joined globex: the use is the send, and it is refused."""
    link = make_link(as_admin)
    browser, page = open_link(link)
    assert "Set a new password" in page.content.decode()
    join_as_admin_elsewhere(dan_signed_in, outsider)
    sent = set_password(browser, page)
    assert "This link does not work" in sent.content.decode()
    assert not authenticate(username="dan", password=NEW)
    assert authenticate(username="dan", password=dan_password)


def test_a_link_of_an_admin_who_is_no_longer_one_no_longer_works(
    as_admin, admin, deployer, org, django_user_model, dan_password
):
    link = make_link(as_admin)
    # Another admin demotes ada (an organisation keeps at least one admin).
    other = client_for(make_member(django_user_model, org, "abe", Role.ADMIN))
    demoted = other.post(
        reverse("accesspolicies:member-role", args=["ada"]),
        {"role": Role.VIEWER},
    )
    assert demoted.status_code == 302
    admin.refresh_from_db()
    assert admin.role == Role.VIEWER
    _, page = open_link(link)
    assert "ada is no longer an admin of" in page.content.decode()
    assert authenticate(username="dan", password=dan_password)


def test_making_and_using_a_link_are_audited_without_the_link(as_admin, deployer, org):
    link = make_link(as_admin)
    made = AuditEntry.objects.get(action="member.password-link")
    assert (made.organization, made.actor_name, made.object_name) == (org, "ada", "dan")
    browser, page = open_link(link)
    done = set_password(browser, page)
    assert "Your new password is set" in done.content.decode()
    used = AuditEntry.objects.get(action="member.password-set")
    assert (used.organization, used.actor_name, used.object_name) == (org, "dan", "dan")
    assert used.detail["linkBy"] == "ada"
    token = link.rstrip("/").rsplit("/", 1)[-1]
    for entry in AuditEntry.objects.all():
        assert token not in str(entry.detail) and token not in entry.object_name
    # The audit page lists both for the admin.
    page = as_admin.get(reverse("accesspolicies:audit")).content.decode()
    assert "member.password-link" in page and "member.password-set" in page


def test_a_link_of_an_admin_whose_account_is_deactivated_no_longer_works(
    as_admin, admin, org, dan_password
):
    """Security review, finding 1: deactivating the admin who made a link ends the link (it
    checked the maker's role, not whether their account still works)."""
    link = make_link(as_admin)
    admin.user.is_active = False
    admin.user.save()
    _, page = open_link(link)
    text = page.content.decode()
    assert "This link does not work" in text
    assert "ada is deactivated" in text
    assert "new_password1" not in text  # no form
    assert authenticate(username="dan", password=dan_password)
    refused = AuditEntry.objects.get(action="member.password-link-refused")
    assert refused.organization == org and refused.object_name == "dan"
    assert refused.detail["linkBy"] == "ada"
    assert "deactivated" in refused.detail["why"]
