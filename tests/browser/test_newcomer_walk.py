"""A newcomer's first deploy, from an empty console: log in, deploy a model through the wizard
on the local profile (this machine, no GPU; the suite's stand-in model server), with Back,
Forward and reload on every step showing what was saved, see it Running, Stop it (asked
first) and Delete it (asked first).

Waits are for state (a heading, a value, the phase in the database), with generous limits: a
2-core machine running other tests is slow, never wrong.
"""

import re
import time

import pytest
import yaml
from playwright.sync_api import Page, expect

from jobs.backends.local.runner import LocalRunner
from jobs.models import Application, Draft, Phase
from jobs.reconciler import Reconciler
from tests.browser.support import off_the_loop

pytestmark = pytest.mark.browser
COMMIT = re.compile(r"^[0-9a-f]{40}$")
STEP = 30_000  # ms: a step's answer (Review dry-runs everything) on a busy machine
M = "spec.source.model"


@pytest.fixture
def no_model_left_running(settings):
    """The model servers the live server started are stopped after the test, pass or fail."""
    yield
    runner = LocalRunner(
        settings.SERVEDECK_LOCAL_STATE_DIR, template=settings.SERVEDECK_LOCAL_COMMAND
    )
    for name in runner.applications():
        runner.delete(name)


def heading(page: Page):
    return page.locator("#step-title")


def at_step(page: Page, title: str) -> None:
    expect(heading(page)).to_have_text(title, timeout=STEP)


def next_step(page: Page, title: str) -> None:
    page.locator(".wizard-nav").get_by_role("button", name=re.compile(r"^Next")).click()
    at_step(page, title)


def back_forward_reload(page: Page, here: str, before: str, shows_here, shows_before) -> None:
    """Browser Back shows the step before as saved, Forward and reload this one as saved."""
    page.go_back()
    at_step(page, before)
    shows_before()
    page.go_forward()
    at_step(page, here)
    shows_here()
    page.reload()
    at_step(page, here)
    shows_here()


def saved_draft() -> dict:
    return off_the_loop(lambda: Draft.objects.get().manifest)


def wait_for_phase(name: str, phase: str) -> None:
    """Run the reconciler (as the console's worker does) until the application is in `phase`."""

    def observe():
        reconciler, deadline = Reconciler(), time.monotonic() + 60
        while True:
            reconciler.step()
            seen = Application.objects.filter(name=name).values_list("phase", flat=True).first()
            if seen == phase:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"{name} never became {phase}: it is {seen}")
            time.sleep(0.2)

    off_the_loop(observe)


def test_a_newcomer_deploys_a_model_and_back_forward_reload_keep_it(
    page: Page, transactional_db, deployer, no_model_left_running, shoot
):
    page.goto("/")
    page.get_by_label("Username").fill("dan")
    page.get_by_label("Password").fill("pw-dan")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    page.locator("nav.nav").get_by_role("link", name="Deploy model").click()
    at_step(page, "Model")
    expect(page.get_by_role("region", name="Your drafts")).to_have_count(0)

    # Model: picking the model suggests its name.
    name, repo = page.get_by_label("Name"), page.get_by_label("Hugging Face model")
    revision = page.get_by_label("Revision")
    repo.press_sequentially("bge-m", delay=30)
    bge = page.locator("#hub-results .hub-pick", has_text="BAAI/bge-m3").first
    expect(bge).to_be_visible(timeout=STEP)
    bge.click()
    expect(revision).to_have_value(COMMIT, timeout=STEP)
    expect(repo).to_have_value("BAAI/bge-m3")
    expect(name).to_have_value("bge-m3")
    expect(page.locator("#name-status")).to_have_text("bge-m3 is free.", timeout=STEP)
    pinned = revision.input_value()
    shoot(page, "01-model")

    def model_shows():
        expect(name).to_have_value("bge-m3")
        expect(repo).to_have_value("BAAI/bge-m3")
        expect(revision).to_have_value(pinned)

    def check_shows():
        result = page.get_by_role("region", name="Check model result")
        expect(result).to_contain_text("The platform can serve this model.")
        expect(result).to_contain_text("embed")

    next_step(page, "Check model")
    expect(page).to_have_url(re.compile(r"/deploy/drafts/[\w-]+/check/$"))
    back_forward_reload(page, "Check model", "Model", check_shows, model_shows)
    # Back on the Model step is the draft's own: Next there makes no second draft.
    page.go_back()
    at_step(page, "Model")
    expect(page).to_have_url(re.compile(r"/deploy/drafts/[\w-]+/model/$"))
    model_shows()
    next_step(page, "Check model")
    assert off_the_loop(Draft.objects.count) == 1
    shoot(page, "02-check")

    # Compute: on the CPU (this machine has no GPU), 6Gi and 1 CPU typed.
    next_step(page, "Compute")
    expect(page.locator("input[name=gpu_kind]:checked")).to_have_value("cpu")
    memory, cpu = page.get_by_label("Memory", exact=True), page.get_by_label("CPU", exact=True)
    memory.fill("6Gi")
    cpu.fill("1")
    shoot(page, "03-compute")

    def compute_shows():
        expect(memory).to_have_value("6Gi")
        expect(cpu).to_have_value("1")
        expect(page.locator("input[name=gpu_kind]:checked")).to_have_value("cpu")

    def access_shows():
        expect(page.get_by_role("radio", name=re.compile("Internal only"))).to_be_checked()

    next_step(page, "Access")
    back_forward_reload(page, "Access", "Compute", access_shows, compute_shows)
    # Back to Compute: a value typed and not saved is gone after a reload (the browser keeps
    # no copy of the form), and Next there keeps what was saved.
    page.go_back()
    at_step(page, "Compute")
    compute_shows()
    memory.fill("7Gi")
    page.reload()
    at_step(page, "Compute")
    compute_shows()
    next_step(page, "Access")
    resources = saved_draft()["spec"]["source"]["model"]["resources"]
    assert (resources["memory"], resources["cpu"]) == ("6Gi", "1")
    shoot(page, "04-access")

    def api_shows():
        expect(page.get_by_role("radio", name=re.compile("OpenAI-compatible"))).to_be_checked()
        expect(page.locator("#wizard")).to_contain_text("/v1/embeddings")
        expect(page.locator(".lead")).to_contain_text("nothing to limit per request")

    next_step(page, "API")
    back_forward_reload(page, "API", "Access", api_shows, access_shows)
    shoot(page, "05-api")

    def review_shows():
        expect(page.get_by_role("region", name="Dry run")).to_contain_text("Dry run passed.")
        expect(page.locator("#local-objects")).to_contain_text("applies nothing to Kubernetes")
        reviewed = yaml.safe_load(page.locator("#review-yaml").inner_text())
        model = reviewed["spec"]["source"]["model"]
        assert (model["resources"]["memory"], model["resources"]["cpu"]) == ("6Gi", "1")
        assert model["uri"] == f"hf://BAAI/bge-m3:{pinned}"

    next_step(page, "Review")
    review_shows()
    back_forward_reload(page, "Review", "API", review_shows, api_shows)
    shoot(page, "06-review")

    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page).to_have_url(re.compile(r"/models/bge-m3/$"), timeout=STEP)
    expect(page.get_by_role("status")).to_contain_text("bge-m3 is deployed", timeout=STEP)
    assert not off_the_loop(Draft.objects.exists)
    wait_for_phase("bge-m3", Phase.RUNNING)
    page.reload()
    running = re.compile(r"bge-m3\s+Running")
    expect(page.get_by_role("heading", level=1)).to_have_text(running, timeout=STEP)
    shoot(page, "07-running")

    asked: list[str] = []

    def answer(dialog) -> None:
        asked.append(dialog.message)
        # Stop asks to confirm; Delete asks for the model's name typed (a prompt).
        dialog.accept("bge-m3" if dialog.type == "prompt" else None)

    page.on("dialog", answer)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("stopped", timeout=STEP)
    expect(page.get_by_role("button", name="Start", exact=True)).to_be_visible(timeout=STEP)
    assert len(asked) == 1 and asked[0].startswith("Stop bge-m3")  # asked before it acted
    shoot(page, "08-stopped")

    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible(timeout=STEP)
    assert asked[1].startswith("Delete bge-m3")
    assert not off_the_loop(Application.objects.exists)
    shoot(page, "09-deleted")
