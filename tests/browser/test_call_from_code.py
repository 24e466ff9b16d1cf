"""An application's "Call it from code" in a real browser: the snippets carry the console's own
origin and the model id, and each Copy button puts its snippet on the clipboard (static JS)."""

import re

import pytest
from playwright.sync_api import Page, expect

from jobs.models import Application
from tests.browser.support import off_the_loop

pytestmark = pytest.mark.browser

CHAT = {
    "apiVersion": "servedeck.io/v1",
    "kind": "Application",
    "spec": {
        "name": "qwen-chat",
        "namespace": "default",
        "access": {"exposure": "Internal"},
        "source": {
            "type": "Model",
            "model": {"uri": "hf://Qwen/Qwen2.5-7B-Instruct", "format": "vLLM"},
        },
    },
}


def test_copy_a_snippet_from_the_application_page(
    page: Page, channels_live_server, org, viewer, shoot
):
    def save():
        Application.objects.create(
            organization=org, name="qwen-chat", profile=org.profiles.get(), manifest=CHAT
        )

    off_the_loop(save)
    page.context.grant_permissions(
        ["clipboard-read", "clipboard-write"], origin=channels_live_server.url
    )
    page.goto("/login/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill("pw-vera")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()

    page.goto("/models/qwen-chat/")
    section = page.get_by_role("region", name="Call it from code")
    expect(section).to_contain_text(f"{channels_live_server.url}/v1")
    python = page.locator("#snippet-python")
    expect(python).to_contain_text(f'base_url="{channels_live_server.url}/v1"')
    expect(python).to_contain_text('model="qwen-chat"')
    expect(page.locator("#snippet-curl")).to_contain_text("$SERVEDECK_API_KEY")
    expect(page.locator("#snippet-javascript")).to_contain_text("client.chat.completions.create")
    shoot(page, "01-call-it-from-code")

    button = section.locator('button.copy[data-copy="#snippet-curl"]')
    button.click()
    expect(button).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith(f"curl {channels_live_server.url}/v1/chat/completions")
    assert re.search(r'"model": "qwen-chat"', copied)
    assert "$SERVEDECK_API_KEY" in copied
