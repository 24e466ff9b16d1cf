"""The overview's charts in a real browser: Plotly (the plotly package's plotly.min.js through
the static files) draws the chart data under the Content-Security-Policy with no console error,
the window buttons read 24 hours, and a `servedeck:chart-points` event extends the hour."""

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from accesspolicies.models import APIKey
from jobs.models import Application, UsageMinute
from tests.browser.support import off_the_loop

pytestmark = pytest.mark.browser

MANIFEST = {"spec": {"namespace": "default", "source": {"model": {"uri": "hf://BAAI/bge-m3"}}}}


def test_charts_draw_switch_window_and_take_live_points(
    page: Page, channels_live_server, org, deployer, shoot, page_problems
):
    now = datetime.now(UTC).replace(second=0, microsecond=0)

    def save():
        app = Application.objects.create(
            organization=org, name="bge-embed", profile=org.profiles.get(), manifest=MANIFEST
        )
        key = APIKey.objects.create(organization=org, name="bot", lookup="bot", secret_hash="0")
        UsageMinute.objects.bulk_create(
            UsageMinute(
                minute=now - timedelta(minutes=n),
                scope=f"s{n}",
                organization=org,
                application=app,
                api_key=key,
                requests=2,
                latency_le_10ms=2,
                completion_tokens=60,
            )
            for n in range(0, 600, 10)
        )

    off_the_loop(save)
    page.goto("/login/")
    page.get_by_label("Username").fill("dan")  # a deployer: the logs are a deployer's
    page.get_by_label("Password").fill("pw-dan")
    page.get_by_role("button", name="Log in").click()
    page.goto("/models/bge-embed/")
    charts = page.locator("[data-charts]")
    expect(charts).to_have_attribute("data-chart-requests", "12")  # 6 rows in the last hour
    expect(page.locator("[data-chart='requests'] .main-svg").first).to_be_visible()
    expect(page.locator("[data-chart='latency'] .main-svg").first).to_be_visible()
    shoot(page, "01-one-hour")

    page.get_by_role("button", name="24 hours").click()
    expect(charts).to_have_attribute("data-chart-requests", "120")
    expect(charts).to_have_attribute("data-chart-points", "288")
    shoot(page, "02-24-hours")

    page.get_by_role("button", name="1 hour").click()
    expect(charts).to_have_attribute("data-chart-requests", "12")
    point = {"t": now.isoformat(), "seconds": 60, "requests": 9, "s2xx": 9, "s4xx": 0,
             "s5xx": 0, "streamErrors": 0, "p50": 5, "p95": 9, "tokensPerSecond": 4,
             "promptTokens": 0, "completionTokens": 240}  # fmt: skip
    page.evaluate(
        "(point) => document.dispatchEvent(new CustomEvent('servedeck:chart-points',"
        " {detail: {points: [point]}}))",
        point,
    )
    expect(charts).to_have_attribute("data-chart-requests", "19")  # 12 - 2 + 9
    shoot(page, "03-live-point")

    # the logs section loads in place; a refused request says why there (htmx drops a 400's
    # body unless the part is marked data-swap-errors). The form's own Lines field already
    # keeps to 1-2000, so the request is made as a hand-edited URL would be.
    logs = page.locator("#replica-logs")
    expect(logs.get_by_label("Lines")).to_be_visible()
    page_problems.expect(r"status of 400 .*/logs/\?lines=5000")
    page.evaluate(
        "() => htmx.ajax('GET', '/models/bge-embed/logs/?lines=5000', "
        "{target: '#replica-logs', swap: 'innerHTML'})"
    )
    expect(logs).to_contain_text("lines: '5000' is not a whole number from 1 to 2000")
    shoot(page, "04-logs-refused")
