"""Members and roles: admins add, change and remove members; an organisation keeps an admin."""

import pytest
from django.urls import reverse

from accesspolicies.models import Membership, PersonalAccessToken


def test_everyone_sees_the_members_only_admins_see_buttons(as_viewer, as_admin, viewer, admin):
    page = as_viewer.get(reverse("accesspolicies:members")).content.decode()
    assert "vera" in page and "ada" in page and "Add a member" not in page
    page = as_admin.get(reverse("accesspolicies:members")).content.decode()
    assert "Add a member" in page and "Remove" in page


def test_admin_adds_a_new_user_with_a_password_shown_once(as_admin, admin, client):
    response = as_admin.post(
        reverse("accesspolicies:member-add"), {"username": "nina", "role": "deployer"}
    )
    page = response.content.decode()
    assert "shown once" in page
    password = page.split('id="new-password">')[1].split("<")[0]
    assert Membership.objects.get(user__username="nina").role == "deployer"
    assert client.login(username="nina", password=password)


def test_adding_an_existing_member_twice_is_refused(as_admin, admin, viewer):
    response = as_admin.post(
        reverse("accesspolicies:member-add"), {"username": "vera", "role": "admin"}
    )
    assert "member of Acme already" in response.content.decode()
    assert Membership.objects.get(user__username="vera").role == "viewer"


def test_an_existing_user_of_another_org_joins_without_a_new_password(as_admin, admin, outsider):
    response = as_admin.post(
        reverse("accesspolicies:member-add"), {"username": "otto", "role": "viewer"}
    )
    assert "new-password" not in response.content.decode()
    assert Membership.objects.filter(user__username="otto").count() == 2


def test_change_role_and_keep_the_last_admin(as_admin, admin, viewer):
    as_admin.post(reverse("accesspolicies:member-role", args=["vera"]), {"role": "deployer"})
    assert Membership.objects.get(user__username="vera").role == "deployer"
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
    assert (
        client.get("/api/v1/applications", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code == 401
    )


@pytest.mark.parametrize(
    "name, args",
    [
        ("member-add", []),
        ("member-role", ["vera"]),
        ("member-remove", ["vera"]),
    ],
)
def test_only_admins_change_members(as_deployer, deployer, viewer, name, args):
    response = as_deployer.post(
        reverse(f"accesspolicies:{name}", args=args), {"username": "x", "role": "admin"}
    )
    assert response.status_code == 403


def test_outsider_cannot_touch_members_of_another_org(as_outsider, viewer):
    response = as_outsider.post(reverse("accesspolicies:member-remove", args=["vera"]))
    assert response.status_code == 404
    assert Membership.objects.filter(user__username="vera").exists()
