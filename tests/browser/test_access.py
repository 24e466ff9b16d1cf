"""Access in a real browser: an API key made and shown once, a revoke that asks first (the
confirmation comes from console.js, no inline script), and an invitation a new person opens."""

import re

import pytest
from playwright.sync_api import Page, expect

from accesspolicies.models import APIKey, Membership, Role
from accesspolicies.secrets import digest
from tests.browser.test_console import log_in

pytestmark = pytest.mark.browser


def test_a_key_is_shown_once_and_revoke_asks_first(page: Page, admin, shoot):
    log_in(page, "ada", "pw-ada")
    page.goto("/access/keys/")
    page.get_by_label("Name").fill("support-bot")
    page.get_by_label("Requests per minute").fill("60")
    page.get_by_role("button", name="Create API key").click()
    secret = page.locator("#shown-once")
    expect(secret).to_contain_text("sdk_")
    plain = secret.inner_text().strip()
    assert APIKey.objects.get(name="support-bot").secret_hash == digest(plain)
    shoot(page, "01-key-created")
    page.reload()
    expect(page.locator("#shown-once")).to_have_count(0)
    expect(page.locator("#keys")).to_contain_text("support-bot")

    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Revoke").click()
    assert asked and "Revoke support-bot?" in asked[0]
    assert APIKey.objects.get(name="support-bot").revoked_at is None
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("support-bot is revoked")
    assert APIKey.objects.get(name="support-bot").revoked_at is not None
    shoot(page, "02-key-revoked")


def test_an_invitation_makes_an_account_and_a_quoted_name_confirms_safely(
    page: Page, browser, admin, org, django_user_model, channels_live_server, shoot
):
    odd = django_user_model.objects.create_user(username="o'neil", password="pw")
    Membership.objects.create(organization=org, user=odd, role=Role.VIEWER)
    log_in(page, "ada", "pw-ada")
    page.goto("/access/members/")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.locator("form[data-confirm*='neil'] button").click()
    assert asked == ["Remove o'neil from Acme?"]
    assert Membership.objects.filter(user=odd).exists()

    page.get_by_label("Role").last.select_option("deployer")
    page.get_by_label("Note").fill("for Nina")
    page.get_by_role("button", name="Create invitation link").click()
    link = page.locator("#shown-once").inner_text().strip()
    assert re.search(r"/access/join/sdi_", link)
    shoot(page, "01-invitation-link")

    newcomer = browser.new_context(base_url=channels_live_server.url).new_page()
    newcomer.goto(link)
    expect(newcomer.get_by_role("heading", name="Join Acme")).to_be_visible()
    newcomer.get_by_label("Username").fill("nina")
    newcomer.get_by_label("Password", exact=True).fill("correct-horse-battery-9")
    newcomer.get_by_label("Password (again)").fill("correct-horse-battery-9")
    newcomer.get_by_role("button", name="Create account and join").click()
    expect(newcomer.locator(".messages")).to_contain_text("Welcome to Acme, nina")
    assert Membership.objects.get(user__username="nina").role == "deployer"
    newcomer.context.close()
