"""Deploy model, the wizard, in a real browser: a chat model on a GPU and an embedding model on
the CPU, both picked with the Hugging Face autocomplete, Back and Next, Review and Deploy; a
gated model without a token stopped at Check model; keyboard only on a phone-sized screen.

The live server runs on a machine with one NVIDIA GPU (a fake nvidia-smi on its PATH), and its
local backend runs the stand-in model server, so a GPU model deploys on the local profile.
"""

import os
import re
import stat
from types import SimpleNamespace

import pytest
import yaml
from playwright.sync_api import Page, expect

from jobs import deploy as verbs
from jobs.backends.local.runner import LocalRunner
from jobs.models import Application, Draft
from tests.helpers import SHORTEST

pytestmark = pytest.mark.browser
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture
def one_gpu(tmp_path, monkeypatch, settings):
    """This machine has one NVIDIA GPU (a fake nvidia-smi first on PATH) for the live server
    forked after it; the model servers the server started are stopped after the test."""
    folder = tmp_path / "one-gpu"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA L4 (UUID: GPU-00000000)'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    yield
    runner = LocalRunner(
        settings.SERVEDECK_LOCAL_STATE_DIR, template=settings.SERVEDECK_LOCAL_COMMAND
    )
    for name in runner.applications():
        runner.delete(name)


@pytest.fixture
def channels_live_server(one_gpu, channels_live_server):
    """The suite's live server, forked once this machine has its GPU."""
    return channels_live_server


@pytest.fixture
def people(transactional_db, admin, deployer, viewer):
    return SimpleNamespace(admin=admin, deployer=deployer, viewer=viewer)


def log_in(page: Page, username: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()


# A step's answer runs a dry run; on a busy CI machine that can take several seconds.
STEP_TIMEOUT = 20_000


def press_next(page: Page) -> None:
    """Enter on the step's Next once the swapped-in step has settled (focus kept on it)."""
    next_button = page.locator(".wizard-nav button.primary")
    # The step's settle moves focus to its heading: focus Next only once no swap is settling.
    page.wait_for_function(
        "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')",
        timeout=STEP_TIMEOUT,
    )
    next_button.focus()
    expect(next_button).to_be_focused()
    page.keyboard.press("Enter")


def step_heading(page: Page):
    return page.locator("#step-title")


def tile(page: Page, kind: str):
    return page.locator("label.tile", has=page.locator(f"input[value='{kind}']"))


def hub_result(page: Page, repo: str):
    exact = page.locator(".hub-id", has_text=re.compile(rf"^{re.escape(repo)}$"))
    return page.locator("#hub-results .hub-pick").filter(has=exact)


def next_step(page: Page, title: str) -> None:
    page.locator(".wizard-nav").get_by_role("button", name=re.compile(r"^Next")).click()
    expect(step_heading(page)).to_have_text(title)


def test_chat_model_on_a_gpu(page: Page, people, shoot):
    log_in(page, "dan")
    page.locator("nav.nav").get_by_role("link", name="Deploy model").click()
    expect(page).to_have_url(re.compile(r"/deploy/$"))
    expect(page.get_by_role("heading", name="Deploy model", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Deploy from YAML")).to_be_visible()
    expect(page.locator(".stepper [aria-current=step]")).to_have_text(re.compile("Model"))
    shoot(page, "01-model-empty")

    name = page.get_by_label("Name")
    name.fill("Qwen_Chat")
    expect(page.locator("#name-status")).to_contain_text("DNS")
    name.fill("qwen-chat")
    expect(page.locator("#name-status")).to_have_text("qwen-chat is free.")

    repo = page.get_by_label("Hugging Face model")
    repo.press_sequentially("qwen", delay=30)
    results = page.locator("#hub-results")
    expect(results).to_contain_text("match “qwen”")
    qwen = hub_result(page, "Qwen/Qwen2.5-7B-Instruct")
    expect(qwen).to_contain_text("text-generation")
    expect(qwen).to_contain_text("2.3M downloads")
    expect(qwen.locator(".badge.gated")).to_have_count(0)
    shoot(page, "02-model-autocomplete")
    qwen.click()
    expect(repo).to_have_value("Qwen/Qwen2.5-7B-Instruct")
    expect(page.get_by_label("Revision")).to_have_value(COMMIT)
    expect(results).to_be_hidden()
    shoot(page, "03-model-picked")

    next_step(page, "Check model")
    expect(page).to_have_url(re.compile(r"/deploy/drafts/[\w-]+/check/$"))
    result = page.get_by_role("region", name="Check model result")
    expect(result).to_contain_text("The platform can serve this model.")
    for fact in ("vllm", "generate", "Qwen2ForCausalLM", "7.6B", "32768 tokens"):
        expect(result).to_contain_text(fact)
    shoot(page, "04-check-model")

    next_step(page, "Compute")
    chosen = page.locator("input[name=gpu_kind]:checked")
    expect(chosen).to_have_value("a10g")
    expect(tile(page, "a10g")).to_contain_text("ServeDeck's choice")
    expect(tile(page, "t4")).to_contain_text("on 2 GPUs")
    expect(page.locator("#memory-needed")).to_contain_text("at 32768 tokens")
    shoot(page, "05-compute")

    # Another GPU kind takes its own smallest size: two t4s, more than this machine has.
    tile(page, "t4").click()
    expect(page.get_by_label("GPUs per replica")).to_have_value("2")
    page.locator(".wizard-nav").get_by_role("button", name="Next: Access").click()
    expect(step_heading(page)).to_have_text("Compute", timeout=STEP_TIMEOUT)
    expect(page.locator(".error").first).to_contain_text("this machine has 1")
    expect(page.locator(".stepper li.attention")).to_have_count(1)
    shoot(page, "06-compute-refused")

    # A shorter context needs less memory; the figure follows as it is typed.
    context = page.get_by_label("Context window (tokens)")
    context.fill("8192")
    expect(page.locator("#memory-needed")).to_contain_text("at 8192 tokens")
    tile(page, "l4").click()
    expect(page.get_by_label("GPUs per replica")).to_have_value("1")
    next_step(page, "Access")
    expect(page).to_have_url(re.compile(r"/access/$"))
    expect(page.get_by_role("radio", name=re.compile("Internal only"))).to_be_checked()
    expect(page.get_by_role("radio", name=re.compile("On your domain"))).to_be_disabled()
    expect(page.locator("#domain-hint")).to_contain_text("verified domain and an access policy")
    shoot(page, "07-access")

    # Back keeps what was saved, and the draft survives a reload.
    page.locator(".wizard-nav").get_by_role("button", name="Back").click()
    expect(step_heading(page)).to_have_text("Compute", timeout=STEP_TIMEOUT)
    expect(page.locator("input[name=gpu_kind]:checked")).to_have_value("l4")
    page.reload()
    expect(step_heading(page)).to_have_text("Compute", timeout=STEP_TIMEOUT)
    expect(page.locator("input[name=gpu_kind]:checked")).to_have_value("l4")
    expect(page.get_by_label("Context window (tokens)")).to_have_value("8192")
    next_step(page, "Access")
    next_step(page, "API")
    expect(page.get_by_role("radio", name=re.compile("OpenAI-compatible"))).to_be_checked()
    expect(page.locator("#wizard")).to_contain_text("/v1/chat/completions")
    expect(page.locator("#wizard")).not_to_contain_text("Media per request")
    shoot(page, "08-api")

    next_step(page, "Review")
    expect(page.get_by_role("region", name="Dry run")).to_contain_text("Dry run passed.")
    expect(page.locator(".dry-run")).to_contain_text("vLLM (vllm runtime)")
    reviewed = page.locator("#review-yaml").inner_text()
    manifest = yaml.safe_load(reviewed)
    gpu = manifest["spec"]["source"]["model"]["resources"]["accelerator"]["gpu"]
    assert (gpu["model"], gpu["countPerReplica"]) == ("l4", 1)
    assert manifest["spec"]["source"]["model"]["serving"]["maxContextTokens"] == 8192
    assert COMMIT.match(manifest["spec"]["source"]["model"]["uri"].rsplit(":", 1)[1])
    shoot(page, "09-review")

    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page).to_have_url(re.compile(r"/models/qwen-chat/$"))
    expect(page.get_by_role("status")).to_contain_text("qwen-chat is deployed")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        re.compile(r"qwen-chat\s+(Pending|Loading|Running)")
    )
    assert yaml.safe_load(page.locator("#manifest-yaml").inner_text()) == manifest
    assert Application.objects.get(name="qwen-chat").manifest == manifest
    assert not Draft.objects.exists()
    shoot(page, "10-deployed")


def test_embedding_model_on_the_cpu_keyboard_only_on_a_phone(page: Page, people, shoot):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, "dan")
    page.goto("/deploy/")
    focused = "document.activeElement && (document.activeElement.id || document.activeElement.name)"

    page.get_by_label("Name").focus()
    page.keyboard.type("bge-embed")
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "wz-profile"
    page.keyboard.press("Tab")  # the source: Hugging Face is chosen already
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "wz-repo"
    page.keyboard.type("bge", delay=30)
    first = page.locator("#hub-results .hub-pick").first
    expect(first).to_contain_text("BAAI/bge-m3")
    expect(first).to_contain_text("sentence-similarity")
    page.keyboard.press("ArrowDown")
    expect(first).to_be_focused()
    shoot(page, "01-model-autocomplete-phone")
    page.keyboard.press("Enter")
    expect(page.get_by_label("Hugging Face model")).to_have_value("BAAI/bge-m3")
    expect(page.get_by_label("Hugging Face model")).to_be_focused()
    page.keyboard.press("Enter")  # Enter in a field is Next
    expect(step_heading(page)).to_have_text("Check model")
    expect(step_heading(page)).to_be_focused()
    expect(page.get_by_role("region", name="Check model result")).to_contain_text("embed")
    shoot(page, "02-check-phone")

    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # past the stepper's links (Model) to Next
    while page.evaluate("document.activeElement.textContent.trim()") != "Next: Compute":
        page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(step_heading(page)).to_have_text("Compute", timeout=STEP_TIMEOUT)
    # The step's settle focuses its heading: pick a tile only after that, or the settle takes
    # the focus from the tile.
    expect(step_heading(page)).to_be_focused()
    # Arrow keys move through the tiles: ServeDeck's choice, a t4, then up to the CPU.
    chosen = page.locator("input[name=gpu_kind]:checked")
    expect(chosen).to_have_value("t4")
    chosen.focus()
    page.keyboard.press("ArrowDown")
    expect(chosen).to_have_value("l4")
    expect(page.locator("#tile-l4")).to_be_focused()  # still there after the tiles refresh
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    expect(chosen).to_have_value("cpu")
    expect(page.get_by_label("GPUs per replica")).to_be_hidden()
    page.get_by_label("Context window (tokens)").focus()
    page.keyboard.press("Control+A")  # the model master's 8192 is filled in
    page.keyboard.type("4096")
    expect(page.locator("#memory-needed")).to_contain_text("at 4096 tokens")
    shoot(page, "03-compute-cpu-phone")
    page.keyboard.press("Enter")
    expect(step_heading(page)).to_have_text("Access", timeout=STEP_TIMEOUT)
    page.keyboard.press("Enter")
    # The heading has focus, not a field: Enter there goes nowhere.
    expect(step_heading(page)).to_have_text("Access", timeout=STEP_TIMEOUT)
    press_next(page)
    expect(step_heading(page)).to_have_text("API", timeout=STEP_TIMEOUT)
    expect(page.locator("#wizard")).to_contain_text("/v1/embeddings")
    press_next(page)
    # Review runs the whole dry run (Check model included): slower than a step on a busy CI.
    expect(step_heading(page)).to_have_text("Review", timeout=STEP_TIMEOUT)
    expect(step_heading(page)).to_be_focused()  # settled: focusing Deploy now keeps it
    manifest = yaml.safe_load(page.locator("#review-yaml").inner_text())
    assert "accelerator" not in manifest["spec"]["source"]["model"]["resources"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "04-review-phone")
    page.get_by_role("button", name="Deploy", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/models/bge-embed/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile("bge-embed"))
    shoot(page, "05-deployed-phone")


def test_a_gated_model_without_a_token_stops_at_check_model(page: Page, people, shoot):
    log_in(page, "dan")
    page.goto("/deploy/")
    page.get_by_label("Name").fill("llama-chat")
    page.get_by_label("Hugging Face model").press_sequentially("llama-3.1-8b", delay=20)
    llama = hub_result(page, "meta-llama/Llama-3.1-8B-Instruct")
    expect(llama.locator(".badge.gated")).to_have_text("Gated")
    shoot(page, "01-gated-in-the-list")
    llama.click()
    expect(page.get_by_label("Hugging Face model")).to_have_value(
        "meta-llama/Llama-3.1-8B-Instruct"
    )
    next_step(page, "Check model")
    result = page.get_by_role("region", name="Check model result")
    expect(result).to_contain_text("gated")
    expect(result).to_contain_text("token")
    next_button = page.get_by_role("button", name="Next: Compute")
    expect(next_button).to_be_disabled()
    expect(page.locator("#cannot-go-on")).to_contain_text("cannot be served cannot go on")
    expect(page.locator(".stepper li.attention")).to_contain_text("Check model")
    shoot(page, "02-check-model-gated")
    # Review cannot be reached with the refusal pending: the address leads back here.
    page.goto(page.url.replace("/check/", "/review/"))
    expect(step_heading(page)).to_have_text("Check model")


def test_a_viewer_cannot_use_the_wizard(page: Page, page_problems, people, shoot):
    log_in(page, "vera")
    expect(page.locator("nav.nav").get_by_role("link", name="Deploy model")).to_have_count(0)
    page_problems.expect(r"status of 403")
    response = page.goto("/deploy/")
    assert response.status == 403
    expect(page.locator("main")).to_contain_text("Your role in Acme is viewer")
    shoot(page, "01-viewer-403")


def test_drafts_resume_and_discard_and_a_running_model_is_edited(page: Page, people, shoot):
    verbs.apply(SHORTEST, people.deployer)
    log_in(page, "dan")
    page.goto("/deploy/")
    page.get_by_label("Name").fill("smol-chat")
    page.get_by_label("Hugging Face model").fill("HuggingFaceTB/SmolLM3-3B")
    next_step(page, "Check model")
    page.locator("nav.nav").get_by_role("link", name="Deploy model").click()
    drafts = page.get_by_role("region", name="Your drafts")
    expect(drafts.locator("summary")).to_have_text("Your drafts (1)")  # collapsed
    expect(drafts.get_by_role("link", name="smol-chat")).to_be_hidden()
    drafts.locator("summary").click()
    expect(drafts).to_contain_text("smol-chat")
    expect(drafts).to_contain_text("hf://HuggingFaceTB/SmolLM3-3B")
    expect(page.get_by_role("region", name="Edit a model that runs")).to_contain_text("bge-embed")
    shoot(page, "01-drafts")

    drafts.get_by_role("link", name="smol-chat").click()
    # Nothing to fix: straight to Review.
    expect(step_heading(page)).to_have_text("Review", timeout=STEP_TIMEOUT)
    page.goto("/deploy/")
    drafts = page.get_by_role("region", name="Your drafts")
    drafts.locator("summary").click()
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    drafts.get_by_role("button", name="Discard").click()
    expect(page.get_by_role("status")).to_contain_text("The draft smol-chat is discarded.")
    assert asked == ["Discard the draft smol-chat? Its saved steps are lost."]
    expect(page.get_by_role("region", name="Your drafts")).to_have_count(0)

    running = page.get_by_role("region", name="Edit a model that runs")
    running.locator("summary").click()  # collapsed, like the drafts
    running.get_by_role("button", name="Edit bge-embed").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Edit bge-embed")
    expect(page.get_by_label("Name")).to_have_attribute("readonly", "")
    expect(page.get_by_label("Profile")).to_be_disabled()
    expect(page.locator("#wz-name-fixed")).to_contain_text("the name is the application")
    shoot(page, "02-edit-model")
    next_step(page, "Check model")
    next_step(page, "Compute")
    page.get_by_label("Min replicas").fill("2")
    page.get_by_label("Max replicas").fill("2")
    next_step(page, "Access")
    next_step(page, "API")
    next_step(page, "Review")
    expect(page.locator(".dry-run")).to_contain_text("Deploy saves a new revision of bge-embed.")
    expect(page.locator(".dry-run")).to_contain_text("fixed at 2 replicas")
    shoot(page, "03-edit-review")
    page.get_by_role("button", name="Deploy revision").click()
    expect(page).to_have_url(re.compile(r"/models/bge-embed/$"))
    expect(page.get_by_role("status")).to_contain_text("Revision 2 of bge-embed is deployed.")
    shoot(page, "04-edit-deployed")
