"""console.js on the pages a newcomer uses, under the Content-Security-Policy: the cluster
form shows its Kubernetes fields only for a Kubernetes cluster, Deploy from YAML's example
fills the manifest, Stop asks first, Delete asks for the model's name, and a live socket the
console closes says why on the page."""

import re

import pytest
from playwright.sync_api import Page, expect

from jobs import deploy as verbs
from jobs.models import Application
from tests.browser.support import off_the_loop
from tests.helpers import SHORTEST

pytestmark = pytest.mark.browser


def log_in(page: Page, who: str = "ada") -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(who)
    page.get_by_label("Password").fill(f"pw-{who}")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()


def test_kubernetes_fields_show_for_a_kubernetes_cluster_only(
    page: Page, page_problems, channels_live_server, admin, shoot
):
    log_in(page)
    page.goto("/clusters/add/")
    backend = page.get_by_label("Backend")
    kubeconfig = page.get_by_label("Kubeconfig path")
    addons = page.get_by_role("group", name="Add-ons")
    backend.select_option("local")
    expect(kubeconfig).to_be_hidden()
    expect(addons).to_be_hidden()
    shoot(page, "cluster-local")
    backend.select_option("kubernetes")
    expect(kubeconfig).to_be_visible()
    expect(addons).to_be_visible()
    shoot(page, "cluster-kubernetes")


def test_the_example_manifest_fills_the_field_and_dry_runs(
    page: Page, page_problems, channels_live_server, deployer, shoot
):
    log_in(page, "dan")
    page.goto("/deploy/yaml/")
    manifest = page.get_by_label("Manifest (YAML or JSON)")
    page.get_by_text("An example manifest").click()
    page.get_by_role("button", name="Use this example").click()
    expect(manifest).to_have_value(re.compile(r"profileName: local"))
    page.get_by_role("button", name="Dry run").click()
    expect(page.locator("#dry-run")).to_contain_text("Dry run passed")
    shoot(page, "yaml-example")


def test_stop_asks_first_and_delete_asks_for_the_name(
    page: Page, page_problems, channels_live_server, deployer, shoot
):
    off_the_loop(lambda: verbs.apply(SHORTEST, deployer))
    log_in(page, "dan")
    page.goto("/models/bge-embed/")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    assert asked and asked[0].startswith("Stop bge-embed?")

    # Mistyped: the server refuses it (400) and the page says what to type; nothing happens.
    page_problems.expect(r"status of 400")
    page.once("dialog", lambda dialog: dialog.accept("bge-embd"))
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.locator("#confirm-name-error")).to_contain_text("is not bge-embed")
    expect(page.get_by_role("heading", level=1)).to_contain_text("bge-embed")
    shoot(page, "mistyped")
    assert off_the_loop(lambda: Application.objects.filter(name="bge-embed").exists())

    page.once("dialog", lambda dialog: dialog.accept("bge-embed"))
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    shoot(page, "deleted")
    assert not off_the_loop(lambda: Application.objects.filter(name="bge-embed").exists())


def test_the_name_typed_into_the_delete_form_asks_nothing_more(
    page: Page, page_problems, channels_live_server, deployer, shoot
):
    off_the_loop(lambda: verbs.apply(SHORTEST, deployer))
    log_in(page, "dan")
    page.goto("/models/bge-embed/")
    asked = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_label("Type bge-embed to delete it").fill("bge-embed")
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    assert not asked
    assert not off_the_loop(lambda: Application.objects.filter(name="bge-embed").exists())


@pytest.fixture
def one_live_page_each(settings):
    """Before the live server forks (it runs with the test's settings)."""
    settings.SERVEDECK_LIVE_SOCKETS_PER_USER = 1


def test_a_page_past_the_live_pages_cap_says_why_it_is_not_live(
    one_live_page_each, page: Page, page_problems, channels_live_server, admin, shoot
):
    log_in(page)  # the Models dashboard: its live socket is the one allowed
    second = page.context.new_page()
    page_problems.watch(second)
    second.goto("/")
    note = second.locator(".live-closed")
    expect(note).to_have_attribute("role", "status")
    expect(note).to_contain_text("Live updates are off on this page")
    expect(note).to_contain_text("Close pages of the console you no longer need")
    shoot(second, "too-many-live-pages")
    expect(page.locator(".live-closed")).to_have_count(0)  # the first page stays live
