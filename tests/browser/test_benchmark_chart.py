"""The model page's benchmark chart in a real browser: Plotly draws each revision's last result
by concurrency level under the Content-Security-Policy (the figures travel as JSON the page
carries, read by a same-site script), with no console error; a viewer sees no Benchmark button."""

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from jobs.models import Application, Benchmark, BenchmarkLevel, Revision
from tests.browser.support import off_the_loop

pytestmark = pytest.mark.browser

MANIFEST = {
    "spec": {
        "namespace": "default",
        "source": {"model": {"uri": "hf://Qwen/Qwen3-0.6B", "format": "vLLM"}},
    }
}


def test_the_benchmark_chart_compares_revisions(
    page: Page, channels_live_server, org, deployer, viewer, shoot, page_problems, axe_violations
):
    def save():
        app = Application.objects.create(
            organization=org,
            name="qwen-chat",
            profile=org.profiles.get(),
            manifest=MANIFEST,
            phase="Running",
        )
        for number, rate in ((1, 40.0), (2, 55.0)):
            revision = Revision.objects.create(
                application=app, number=number, manifest=MANIFEST, outcome="Applied"
            )
            run = Benchmark.objects.create(
                application=app,
                revision=revision,
                task="chat",
                route="/v1/chat/completions",
                state="Succeeded",
                prompt_source="tokenizer",
                prompt_tokens=128,
                deadline=datetime.now(UTC),
            )
            for concurrency in (1, 4, 16):
                BenchmarkLevel.objects.create(
                    benchmark=run,
                    concurrency=concurrency,
                    requests=8,
                    output_tokens=512,
                    output_tokens_per_second=rate * concurrency,
                    requests_per_second=1.0,
                    ttft_p50_ms=20.0 * concurrency,
                    ttft_p95_ms=30.0 * concurrency,
                )

    off_the_loop(save)
    page.goto("/login/")
    page.get_by_label("Username").fill("dan")
    page.get_by_label("Password").fill("pw-dan")
    page.get_by_role("button", name="Log in").click()
    page.goto("/models/qwen-chat/")
    section = page.locator("[data-benchmarks]")
    expect(section).to_have_attribute("data-benchmark-series", "2")
    expect(section.locator("[data-benchmark-chart='throughput'] .main-svg").first).to_be_visible()
    expect(section.locator("[data-benchmark-chart='latency'] .main-svg").first).to_be_visible()
    expect(section.get_by_role("button", name="Benchmark")).to_be_enabled()
    # deploy history says each revision's last result, a link to the section
    headlines = page.locator("[data-benchmark-headline]")
    expect(headlines).to_have_text(
        ["880 tokens/s at 16 concurrent", "640 tokens/s at 16 concurrent"]
    )
    section.scroll_into_view_if_needed()
    shoot(page, "01-benchmarks")
    assert axe_violations(page) == []
    # On a phone's width the table scrolls in its own region; the page does not.
    page.set_viewport_size({"width": 390, "height": 800})
    page.reload()  # drawn for this width, as a phone would first draw it
    expect(section.locator("[data-benchmark-chart='throughput'] .main-svg").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert axe_violations(page) == []
    page.set_viewport_size({"width": 1280, "height": 800})

    page.context.clear_cookies()
    page.goto("/login/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill("pw-vera")
    page.get_by_role("button", name="Log in").click()
    page.goto("/models/qwen-chat/")
    expect(section).to_have_attribute("data-benchmark-series", "2")
    expect(section.get_by_role("button", name="Benchmark")).to_have_count(0)
