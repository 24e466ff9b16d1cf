"""What the Access tests share: applications that exist without being deployed, the REST API as
an admin, and running management commands."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from jobs.models import Application
from tests.helpers import bearer


def make_application(org, name: str, **access) -> Application:
    manifest = {"spec": {"name": name, "access": access or {"exposure": "Internal"}}}
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(name="local"), manifest=manifest
    )


@pytest.fixture
def api(admin):
    """A client acting as the admin through a personal access token."""
    client = Client(**bearer(admin))
    return client


def run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()
