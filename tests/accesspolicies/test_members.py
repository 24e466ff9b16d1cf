"""Members: admins invite with a one-time link, change roles and remove members; the
organisation keeps an admin, even when two admins demote each other at once."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accesspolicies import members
from accesspolicies.models import (
    AuditEntry,
    Invitation,
    Membership,
    MembershipError,
    PersonalAccessToken,
    Role,
)
from accesspolicies.secrets import digest
from tests.helpers import make_member

STRONG = "correct-horse-battery-9"


def _link(as_admin, role="deployer", **extra):
    response = as_admin.post(
        reverse("accesspolicies:invite"),
        {"role": role, "note": "for Nina", "expires_in_days": 7, **extra},
    )
    assert response.status_code == 302
    page = as_admin.get(response["Location"]).content.decode()
    return page.split('id="shown-once">')[1].split("<")[0]


def _path(link: str) -> str:
    return link.removeprefix("http://testserver")


def test_everyone_sees_the_members_only_admins_see_buttons(as_viewer, as_admin, viewer, admin):
    page = as_viewer.get(reverse("accesspolicies:members")).content.decode()
    assert "vera" in page and "ada" in page and "Invite someone" not in page
    page = as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert "Invite someone" in page and "Remove" in page


def test_the_page_has_no_inline_script_and_confirms_through_data_attributes(as_admin, admin):
    page = as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert "onsubmit" not in page and "onclick" not in page
    assert 'data-confirm="Remove ada from Acme?"' in page


def test_a_username_with_a_quote_or_slash_does_not_break_the_page(as_admin, org):
    # Made outside the product's checks (an old version, the admin site): the page still works.
    odd = get_user_model().objects.create_user(username="o'neil/x", password="pw")
    Membership.objects.create(organization=org, user=odd, role=Role.VIEWER)
    page = as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert 'data-confirm="Remove o&#x27;neil/x from Acme?"' in page
    url = reverse("accesspolicies:member-role", args=["o'neil/x"])
    assert as_admin.post(url, {"role": "deployer"}).status_code == 302
    assert Membership.objects.get(user=odd).role == "deployer"
    url = reverse("accesspolicies:member-remove", args=["o'neil/x"])
    assert as_admin.post(url).status_code == 302
    assert not Membership.objects.filter(user=odd).exists()


def test_the_link_is_shown_once_and_only_its_hash_is_stored(as_admin, admin):
    link = _link(as_admin)
    token = link.rstrip("/").rsplit("/", 1)[1]
    invitation = Invitation.objects.get()
    assert token.startswith("sdi_") and invitation.secret_hash == digest(token)
    assert token not in str(list(Invitation.objects.values().get().values()))
    assert link not in as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert AuditEntry.objects.filter(action="invitation.create").exists()


def test_a_logged_in_person_joins_once(as_admin, outsider, as_outsider):
    path = _path(_link(as_admin, role="viewer"))
    page = as_outsider.get(path).content.decode()
    assert "Join Acme" in page and "otto" in page
    assert as_outsider.post(path).status_code == 302
    joined = Membership.objects.get(user__username="otto", organization__slug="acme")
    assert joined.role == "viewer"
    assert AuditEntry.objects.filter(action="member.join", object_name="otto").exists()
    again = as_outsider.post(path)
    assert again.status_code == 410 and "used already" in again.content.decode()


def test_a_new_person_makes_an_account_and_joins(as_admin, admin):
    path = _path(_link(as_admin))
    newcomer = Client()
    response = newcomer.post(
        path, {"username": "nina", "password": STRONG, "password_again": STRONG}
    )
    assert response.status_code == 302
    assert Membership.objects.get(user__username="nina").role == "deployer"
    assert newcomer.get("/").status_code == 200  # logged in
    assert Client().login(username="nina", password=STRONG)
    second = Client().post(path, {"username": "nora", "password": STRONG, "password_again": STRONG})
    assert second.status_code == 410
    assert not get_user_model().objects.filter(username="nora").exists()


@pytest.mark.parametrize(
    "username, password, words",
    [
        ("nina", "123", "This password is too short"),
        ("nina", "password123", "too common"),
        ("ni'na", STRONG, "is not a username; a username is 1 to 150 characters"),
        ("ni/na", STRONG, "is not a username"),
        ("x" * 151, STRONG, "Ensure this value has at most 150 characters"),
    ],
)
def test_a_new_account_is_checked(as_admin, admin, username, password, words):
    path = _path(_link(as_admin))
    response = Client().post(
        path, {"username": username, "password": password, "password_again": password}
    )
    assert response.status_code == 400
    assert words in response.content.decode()
    assert Invitation.objects.get().accepted_at is None


def test_the_answer_never_tells_a_username_exists_in_another_organisation(as_admin, outsider):
    path = _path(_link(as_admin))
    taken = Client().post(path, {"username": "otto", "password": STRONG, "password_again": STRONG})
    other = Client().post(path, {"username": "OTTO", "password": STRONG, "password_again": STRONG})
    for response in (taken, other):
        page = response.content.decode()
        assert response.status_code == 400
        assert "cannot be used; choose another username" in page
        assert "Globex" not in page and "member" not in page.split("<main")[1].lower()
    assert not Membership.objects.filter(user__username="otto", organization__slug="acme")


def test_an_expired_or_withdrawn_invitation_does_nothing(as_admin, admin, as_outsider):
    path = _path(_link(as_admin))
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = as_outsider.post(path)
    assert response.status_code == 410 and "expired" in response.content.decode()
    path = _path(_link(as_admin))
    invitation = Invitation.objects.get(expires_at__gt=timezone.now())
    as_admin.post(reverse("accesspolicies:invitation-withdraw", args=[invitation.lookup]))
    response = as_outsider.post(path)
    assert response.status_code == 410 and "withdrawn" in response.content.decode()
    assert Membership.objects.filter(organization__slug="acme").count() == 1


def test_a_forged_link_is_not_valid(as_admin, admin, as_outsider):
    path = _path(_link(as_admin))
    forged = path[:-2] + ("AA/" if not path.endswith("AA/") else "BB/")
    response = as_outsider.post(forged)
    assert response.status_code == 410 and "not valid" in response.content.decode()
    assert Invitation.objects.get().accepted_at is None


def test_a_member_already_leaves_the_invitation_unused(as_admin, admin, viewer, as_viewer):
    path = _path(_link(as_admin, role="admin"))
    response = as_viewer.post(path)
    assert "member of Acme already" in response.content.decode()
    assert Membership.objects.get(user=viewer.user).role == "viewer"
    assert Invitation.objects.get().accepted_at is None


def test_another_organisations_admin_cannot_withdraw_or_see_it(as_admin, admin, as_outsider):
    _link(as_admin)
    invitation = Invitation.objects.get()
    url = reverse("accesspolicies:invitation-withdraw", args=[invitation.lookup])
    assert as_outsider.post(url).status_code == 404
    page = as_outsider.get(reverse("accesspolicies:members")).content.decode()
    assert "for Nina" not in page
    invitation.refresh_from_db()
    assert invitation.revoked_at is None


def test_change_role_and_keep_the_last_admin(as_admin, admin, viewer):
    as_admin.post(reverse("accesspolicies:member-role", args=["vera"]), {"role": "deployer"})
    assert Membership.objects.get(user__username="vera").role == "deployer"
    entry = AuditEntry.objects.get(action="member.role")
    assert entry.detail["from"] == "viewer" and entry.detail["to"] == "deployer"
    response = as_admin.post(
        reverse("accesspolicies:member-role", args=["ada"]), {"role": "viewer"}, follow=True
    )
    assert "last admin" in response.content.decode()
    assert Membership.objects.get(user__username="ada").role == "admin"
    response = as_admin.post(reverse("accesspolicies:member-remove", args=["ada"]), follow=True)
    assert "last admin" in response.content.decode()


def test_removing_a_member_revokes_their_tokens_here(as_admin, admin, deployer, client):
    _, plain = PersonalAccessToken.issue(deployer.user, deployer.organization, "ci")
    as_admin.post(reverse("accesspolicies:member-remove", args=["dan"]))
    assert not Membership.objects.filter(user__username="dan").exists()
    assert AuditEntry.objects.filter(action="member.remove", object_name="dan").exists()
    assert (
        client.get("/api/v1/applications", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code == 401
    )


@pytest.mark.parametrize(
    "name, args",
    [
        ("invite", []),
        ("member-role", ["vera"]),
        ("member-remove", ["vera"]),
        ("invitation-withdraw", ["0123456789ab"]),
    ],
)
def test_only_admins_change_members(as_deployer, deployer, viewer, name, args):
    response = as_deployer.post(reverse(f"accesspolicies:{name}", args=args), {"role": "admin"})
    assert response.status_code == 403
    assert Membership.objects.get(user__username="vera").role == "viewer"
    assert not Invitation.objects.exists()


def test_outsider_cannot_touch_members_of_another_org(as_outsider, viewer):
    response = as_outsider.post(reverse("accesspolicies:member-remove", args=["vera"]))
    assert response.status_code == 404
    assert Membership.objects.filter(user__username="vera").exists()


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs row locks: SQLite has no SELECT … FOR UPDATE; CI runs it on PostgreSQL "
    "(DATABASE_URL=postgres://…)",
)
@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_at_once_leave_one_admin(org, django_user_model):
    ada = make_member(django_user_model, org, "ada", Role.ADMIN)
    bob = make_member(django_user_model, org, "bob", Role.ADMIN)

    def demote(actor_pk, target_pk, barrier, outcomes):
        try:
            actor = Membership.objects.select_related("organization", "user").get(pk=actor_pk)
            target = Membership.objects.select_related("organization", "user").get(pk=target_pk)
            barrier.wait()
            members.change_role(target, Role.VIEWER, actor=actor)
            outcomes.append("demoted")
        except MembershipError:
            outcomes.append("refused")
        finally:
            connections.close_all()

    for _ in range(10):  # the race is not forced: several rounds make the overlap likely
        Membership.objects.filter(pk__in=[ada.pk, bob.pk]).update(role=Role.ADMIN)
        barrier, outcomes = threading.Barrier(2), []
        threads = [
            threading.Thread(target=demote, args=(ada.pk, bob.pk, barrier, outcomes)),
            threading.Thread(target=demote, args=(bob.pk, ada.pk, barrier, outcomes)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        admins = Membership.objects.filter(organization=org, role=Role.ADMIN).count()
        assert admins == 1, outcomes
        assert sorted(outcomes) == ["demoted", "refused"], outcomes
