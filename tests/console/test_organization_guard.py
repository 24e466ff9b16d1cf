"""Medium 9: a page opened for one organisation never acts on another. Every state-changing page
request says which organisation its page was opened for; a mismatch is refused with 409."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from accesspolicies.access import ORG_SESSION_KEY
from accesspolicies.models import Membership, Role
from jobs.deploy import apply
from jobs.models import Application
from tests.helpers import SHORTEST


@pytest.fixture
def two_orgs(admin, other_org):
    """ada administers acme and globex; each has an application `bge-embed`."""
    Membership.objects.create(organization=other_org, user=admin.user, role=Role.ADMIN)
    apply(SHORTEST, admin)
    apply(SHORTEST, Membership.objects.get(user=admin.user, organization=other_org))
    browser = Client()
    browser.force_login(admin.user)
    return browser


def delete_url():
    return reverse("jobs:application-delete", args=["bge-embed"])


def switch(browser, slug):
    assert (
        browser.post(reverse("console:switch-organization"), {"organization": slug}).status_code
        == 302
    )


def test_a_form_opened_for_acme_cannot_delete_globex_application(two_orgs):
    switch(two_orgs, "acme")
    page = two_orgs.get(reverse("jobs:application-detail", args=["bge-embed"])).content.decode()
    sent = re.search(r'name="page_organization" value="([^"]+)"', page).group(1)
    assert sent == "acme"
    switch(two_orgs, "globex")  # in another tab
    response = two_orgs.post(delete_url(), {"page_organization": sent})
    assert response.status_code == 409
    text = response.content.decode()
    assert "opened for organisation <strong>acme</strong>" in text
    assert "switched to <strong>Globex</strong>" in text
    assert "Reload the page" in text
    assert Application.objects.filter(name="bge-embed").count() == 2


def test_a_form_without_its_organisation_is_refused(two_orgs):
    response = two_orgs.post(delete_url())
    assert response.status_code == 409
    assert "did not say which organisation" in response.content.decode()
    assert Application.objects.count() == 2


def test_the_htmx_header_carries_it_too(two_orgs):
    switch(two_orgs, "globex")
    refused = two_orgs.post(
        delete_url(), headers={"X-Page-Organization": "acme", "HX-Request": "true"}
    )
    assert refused.status_code == 409
    assert refused["X-Organization-Mismatch"] == "1"
    assert "<html" not in refused.content.decode()  # a fragment for htmx to show
    typed = {"confirm_name": "bge-embed"}
    done = two_orgs.post(delete_url(), typed, headers={"X-Page-Organization": "globex"})
    assert done.status_code == 302
    assert list(Application.objects.values_list("organization__slug", flat=True)) == ["acme"]


def test_the_matching_organisation_acts(two_orgs):
    switch(two_orgs, "acme")
    sent = {"page_organization": "acme", "confirm_name": "bge-embed"}
    assert two_orgs.post(delete_url(), sent).status_code == 302
    assert list(Application.objects.values_list("organization__slug", flat=True)) == ["globex"]


def test_removed_from_the_session_organisation_is_said_not_silent(two_orgs, admin):
    switch(two_orgs, "acme")
    admin.delete()  # ada is no longer a member of acme
    page = two_orgs.get(reverse("console:home"), follow=True)
    assert "no longer a member of the organisation &#x27;acme&#x27;" in page.content.decode()
    assert two_orgs.session[ORG_SESSION_KEY] == "globex"
    # a form still open for acme changes nothing in globex
    assert two_orgs.post(delete_url(), {"page_organization": "acme"}).status_code == 409
    assert Application.objects.filter(organization__slug="globex").exists()


FORM = re.compile(r"<form\b[^>]*method=\"post\"[^>]*>(.*?)</form>", re.S | re.I)
HX_WRITE = re.compile(r"\bhx-(post|put|patch|delete)=")


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/models/bge-embed/",
        "/deploy/",
        "/deploy/yaml/",
        "/clusters/local/",
        "/profiles/local/",
        "/access/tokens/",
        "/catalog/masters/",
        "/catalog/masters/add/",
        "/catalog/masters/recipe/",
    ],
)
def test_every_post_form_carries_the_organisation(two_orgs, url):
    switch(two_orgs, "acme")
    page = two_orgs.get(url, follow=True).content.decode()
    forms = FORM.findall(page)
    assert forms, f"{url} has no POST form to check"
    for body in forms:
        assert 'name="page_organization" value="acme"' in body, body[:200]
    if HX_WRITE.search(page):
        assert '"X-Page-Organization": "acme"' in page
