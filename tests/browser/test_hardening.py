"""Hardening in a real browser, under the Content-Security-Policy: a page left open for one
organisation is refused after a switch in another tab; the API's docs run from packaged files."""

import re

import pytest
from playwright.sync_api import Page, expect

from accesspolicies.models import Membership, Role
from jobs import deploy as verbs
from jobs.models import Application
from tests.browser.support import off_the_loop
from tests.helpers import SHORTEST

pytestmark = pytest.mark.browser

MANUAL = SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual")


@pytest.fixture
def two_orgs(channels_live_server, transactional_db, admin, other_org):
    def make():
        second = Membership.objects.create(organization=other_org, user=admin.user, role=Role.ADMIN)
        verbs.apply(MANUAL, admin)
        verbs.apply(MANUAL, second)

    off_the_loop(make)


def log_in(page: Page) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("pw-ada")
    page.get_by_role("button", name="Log in").click()


def test_a_tab_left_on_acme_cannot_delete_globex_model(page: Page, page_problems, two_orgs, shoot):
    page_problems.expect(r"status of 409")
    log_in(page)
    page.goto("/models/bge-embed/")
    expect(page.locator(".who")).to_contain_text("Acme")
    other = page.context.new_page()
    page_problems.watch(other)
    other.goto("/")
    other.select_option("#org-switch", "globex")  # submits on change (console.js)
    expect(other.locator(".who")).to_contain_text("Globex")
    # Delete asks for the name first (data-confirm-name)
    page.once("dialog", lambda dialog: dialog.accept("bge-embed"))
    page.get_by_role("button", name="Delete").click()
    expect(
        page.get_by_role("heading", name="This page is for another organisation")
    ).to_be_visible()
    expect(page.locator("main")).to_contain_text("opened for organisation acme")
    shoot(page, "refused")
    slugs = off_the_loop(
        lambda: sorted(Application.objects.values_list("organization__slug", flat=True))
    )
    assert slugs == ["acme", "globex"]


def test_the_api_docs_run_under_the_policy(page: Page, two_orgs, shoot):
    page.goto("/api/v1/docs")
    expect(page.locator(".swagger-ui .title")).to_contain_text("ServeDeck API")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    shoot(page, "docs")


def test_an_htmx_step_left_on_acme_shows_the_refusal(page: Page, page_problems, two_orgs, shoot):
    """The wizard posts with htmx: the refusal replaces the page's content (console.js), the
    draft is not saved in the organisation switched to."""
    from jobs.models import Draft

    page_problems.expect(r"status of 409")
    log_in(page)
    page.goto("/deploy/")
    page.get_by_label("Name").fill("qwen-chat")
    other = page.context.new_page()
    page_problems.watch(other)
    other.goto("/")
    other.select_option("#org-switch", "globex")
    expect(other.locator(".who")).to_contain_text("Globex")
    page.locator(".wizard-nav").get_by_role("button", name=re.compile(r"^Next")).click()
    expect(
        page.get_by_role("heading", name="This page is for another organisation")
    ).to_be_visible()
    expect(page.locator("main")).to_contain_text("switched to Globex")
    shoot(page, "refused")
    assert off_the_loop(lambda: Draft.objects.count()) == 0
