"""Personas and a little of everything the tests share: an org admin, a deployer, a viewer, and
an outsider from another organisation, each with a `local` profile in their organisation."""

import pytest
from django.test import Client

from accesspolicies.models import Membership, Organization, PersonalAccessToken, Role
from jobs.models import Cluster, Profile

SHORTEST = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bge-embed
  profileName: local
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""


def make_org(slug: str) -> Organization:
    org = Organization.objects.create(slug=slug, name=slug.title())
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    return org


def make_member(django_user_model, org, username, role) -> Membership:
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    return Membership.objects.create(organization=org, user=user, role=role)


@pytest.fixture
def org(db):
    return make_org("acme")


@pytest.fixture
def other_org(db):
    return make_org("globex")


@pytest.fixture
def admin(org, django_user_model):
    return make_member(django_user_model, org, "ada", Role.ADMIN)


@pytest.fixture
def deployer(org, django_user_model):
    return make_member(django_user_model, org, "dan", Role.DEPLOYER)


@pytest.fixture
def viewer(org, django_user_model):
    return make_member(django_user_model, org, "vera", Role.VIEWER)


@pytest.fixture
def outsider(other_org, django_user_model):
    return make_member(django_user_model, other_org, "otto", Role.ADMIN)


def client_for(membership) -> Client:
    client = Client()
    client.force_login(membership.user)
    return client


@pytest.fixture
def as_admin(admin):
    return client_for(admin)


@pytest.fixture
def as_deployer(deployer):
    return client_for(deployer)


@pytest.fixture
def as_viewer(viewer):
    return client_for(viewer)


@pytest.fixture
def as_outsider(outsider):
    return client_for(outsider)


def bearer(membership) -> dict:
    _, plain = PersonalAccessToken.issue(membership.user, membership.organization, "test")
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
