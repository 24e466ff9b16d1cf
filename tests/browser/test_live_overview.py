"""The live overview in a real browser on the embedded defaults: the reconciler inside the live
server's process, the in-memory channel layer, htmx's WebSocket extension. A model deployed
through the REST API comes up on the local backend's stand-in server; real requests through
the gateway move the cards; the server killed turns the badge Failed with its reason; a
second page on the dashboard sees each phase change. Nothing is reloaded."""

import io
import json
import os
import re
import signal

import httpx
import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from jobs.backends.local.backend import local_runner
from tests.browser.support import off_the_loop
from tests.helpers import SHORTEST, bearer, wait_for

pytestmark = pytest.mark.browser

# Long enough that the page shows it coming up on a loaded machine (2 s was once too short).
SLOW_START = SHORTEST + "      engine:\n        extraArgs: [--startup-delay, '8']\n"


@pytest.fixture
def reconciler_in_process(settings, monkeypatch):
    settings.SERVEDECK_RECONCILER_IN_PROCESS = True
    monkeypatch.setenv("SERVEDECK_RECONCILER_IN_PROCESS", "true")


@pytest.fixture
def channels_live_server(reconciler_in_process, channels_live_server):
    """The conftest's live server, forked with the reconciler on (the embedded default)."""
    return channels_live_server


def log_in(page: Page, username: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill("pw-" + username)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_a_model_comes_up_takes_traffic_and_fails_live(
    page: Page, page_problems, channels_live_server, admin, viewer, shoot
):
    live = channels_live_server.url
    headers = {"Authorization": off_the_loop(bearer, admin)["HTTP_AUTHORIZATION"]}
    log_in(page, "vera")
    # Deployed through the live server's REST API: its own process starts and follows it.
    created = httpx.post(
        f"{live}/api/v1/applications",
        headers={**headers, "Content-Type": "application/yaml"},
        content=SLOW_START,
        timeout=30,
    )
    assert created.status_code == 201, created.text

    dashboard = page.context.new_page()
    page_problems.watch(dashboard)
    dashboard.set_default_timeout(10_000)
    dashboard.goto("/")
    page.goto("/models/bge-embed/")
    badge = page.locator("#live-phase")
    expect(page.locator("#live-serving [data-figure=replicas]")).to_have_text("0 of 1")
    shoot(page, "01-coming-up")

    expect(badge).to_have_text("Running", timeout=30_000)
    expect(dashboard.locator("#dash-phase-bge-embed")).to_have_text("Running")
    expect(page.locator("#live-serving [data-figure=replicas]")).to_have_text("1 of 1")
    expect(page.locator("#live-events li").first).to_contain_text("Running")
    shoot(page, "02-running")
    shoot(dashboard, "03-dashboard-running")
    # Sorting swaps the table (htmx): its socket is replaced, not doubled, and still follows.
    dashboard.locator("#applications thead").get_by_role("link", name="Name").click()
    expect(dashboard).to_have_url(re.compile(r"sort="))
    expect(dashboard.locator("#dashboard-socket")).to_have_count(1)

    # Real requests through the gateway, with a key made on the command line.
    made = json.loads(off_the_loop(command, "apikey", "create", "live-caller", "--json"))
    calls = httpx.Client(base_url=f"{live}/v1", timeout=10)
    auth = {"Authorization": f"Bearer {made['key']}"}
    wait_for(  # the key's reload
        lambda: calls.get("/models", headers=auth).status_code != 401,
        "the gateway never accepted the new key",
        every=0.2,
    )
    body = {"model": "bge-embed", "messages": [{"role": "user", "content": "Say three words"}]}
    for _ in range(12):
        assert calls.post("/chat/completions", headers=auth, json=body).status_code == 200
    rate = page.locator("#live-traffic [data-figure=requests-per-minute]")
    expect(rate).not_to_have_text(re.compile(r"^0$"), timeout=10_000)
    expect(page.locator("#live-traffic [data-figure=success-rate]")).to_have_text("100%")
    expect(page.locator("#live-traffic [data-figure=tokens-per-second]")).not_to_have_text("0")
    expect(page.locator("#live-traffic [data-figure=latency-p50]")).to_have_text(
        re.compile(r"\d+ ms")
    )
    # The requests chart grows by the points the socket sends, without reading its data again.
    page.wait_for_function(
        """() => {
            const chart = document.querySelector("[data-chart=requests]");
            const bars = chart && chart.data && chart.data[0] ? chart.data[0].y : [];
            return bars.reduce((sum, value) => sum + (value || 0), 0) >= 12;
        }""",
        timeout=10_000,
    )
    shoot(page, "04-traffic")
    expect(dashboard.locator("#dash-spark-bge-embed svg")).to_have_attribute(
        "aria-label", re.compile(r"^1[0-9] requests in the last hour$")
    )

    # The server killed: the reconciler sees it, the page says why and what to do.
    replicas = off_the_loop(lambda: local_runner("acme").observe("bge-embed").replicas)
    for replica in replicas:
        os.kill(replica.pid, signal.SIGKILL)
    expect(badge).to_have_text("Failed", timeout=30_000)
    status = page.locator("#live-status")
    expect(status.locator(".callout.bad")).to_contain_text("Why:")
    expect(status.locator(".next-step")).to_contain_text("Next step:")
    expect(dashboard.locator("#dash-phase-bge-embed")).to_have_text("Failed")
    shoot(page, "05-failed")
    shoot(dashboard, "06-dashboard-failed")
    calls.close()
