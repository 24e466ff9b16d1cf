"""The one access decision, for every object type a member reaches: the object and what the
member may do with it; 404 for another organisation's (or another member's) object, 403 when
the role may not do the action."""

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from accesspolicies.models import AccessPolicy, APIKey, PersonalAccessToken, VerifiedDomain
from accesspolicies.scope import Permissions
from jobs.models import Application, Cluster, Draft, Profile
from models_catalog.models import ModelMaster
from tests.helpers import SHORTEST


@pytest.fixture
def objects(admin, deployer):
    from jobs.deploy import apply

    org = admin.organization
    apply(SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual"), admin)
    cluster = Cluster.objects.create(organization=org, name="acme-gpu")
    Profile.objects.create(organization=org, name="acme-gpu", cluster=cluster)
    draft = Draft.objects.create(organization=org, author=deployer.user, manifest={})
    ModelMaster.objects.create(organization=org, model_id="acme/tiny")
    APIKey.objects.create(organization=org, name="bge-embed", lookup="scopekey0000")
    AccessPolicy.objects.create(organization=org, name="bge-embed")
    VerifiedDomain.objects.create(organization=org, domain="scope.example.com")
    PersonalAccessToken.issue(deployer.user, org, "scope")
    # the model and the key a member names it by
    return {
        "application": (Application, "bge-embed"),
        "cluster": (Cluster, "acme-gpu"),
        "profile": (Profile, "acme-gpu"),
        "draft": (Draft, draft.key),
        "master": (ModelMaster, "acme--tiny"),
        "key": (APIKey, "bge-embed"),
        "policy": (AccessPolicy, "bge-embed"),
        "domain": (VerifiedDomain, "scope.example.com"),
        "token": (PersonalAccessToken, "scope"),
    }


TYPES = [
    "application",
    "cluster",
    "profile",
    "draft",
    "master",
    "key",
    "policy",
    "domain",
    "token",
]


@pytest.mark.parametrize("kind", TYPES)
def test_an_outsider_does_not_find_it(objects, outsider, kind):
    model, key = objects[kind]
    with pytest.raises(Http404):
        model.objects.get_for_member(outsider, key)


@pytest.mark.parametrize("kind", TYPES)
def test_the_member_gets_it_with_what_they_may_do(objects, deployer, kind):
    model, key = objects[kind]
    if kind in ("policy", "domain", "key"):  # an admin's business even to see
        with pytest.raises(PermissionDenied, match="is deployer, which may not administer"):
            model.objects.get_for_member(deployer, key)
        return
    found, may = model.objects.get_for_member(deployer, key, "deploy")
    assert found.pk is not None
    assert may == Permissions(view=True, deploy=True, admin=False)
    with pytest.raises(PermissionDenied, match="which may not administer"):
        model.objects.get_for_member(deployer, key, "admin")


def test_a_viewer_sees_but_may_not_deploy(objects, viewer):
    found, may = Application.objects.get_for_member(viewer, "bge-embed")
    assert found.name == "bge-embed" and may == Permissions(view=True, deploy=False, admin=False)
    with pytest.raises(PermissionDenied, match="is viewer, which may not deploy"):
        Application.objects.get_for_member(viewer, "bge-embed", "deploy")
    with pytest.raises(PermissionDenied):  # a draft is a deployer's business
        Draft.objects.for_member(viewer)


def test_drafts_and_tokens_are_their_authors_alone(objects, admin):
    _, draft_key = objects["draft"]
    with pytest.raises(Http404):
        Draft.objects.get_for_member(admin, draft_key)
    with pytest.raises(Http404):
        PersonalAccessToken.objects.get_for_member(admin, "scope")


@pytest.mark.parametrize("key", ["x" * 10_000, "bad\x00name", 7, None])
def test_a_hostile_key_is_not_found_and_not_echoed(objects, admin, key):
    with pytest.raises(Http404) as raised:
        Application.objects.get_for_member(admin, key)
    assert len(str(raised.value)) < 200


def test_no_membership_is_refused():
    with pytest.raises(PermissionDenied, match="not a member of any organisation"):
        Application.objects.for_member(None)
