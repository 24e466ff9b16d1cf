"""The console in a real browser: log in, the Models dashboard, an application's page, Deploy
model from YAML, what a viewer may not do, the keyboard, and a phone-sized screen."""

import re
import time

import pytest
from playwright.sync_api import Page, expect

from jobs import deploy as verbs
from jobs.models import Application, Phase
from jobs.reconciler import Reconciler
from tests.browser.support import off_the_loop
from tests.helpers import SHORTEST

pytestmark = pytest.mark.browser

SECOND = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: qwen-chat
  profileName: local
  syncType: Manual
  source:
    type: Model
    model:
      uri: hf://Qwen/Qwen2.5-7B-Instruct
      resources:
        memory: 8Gi  # two replicas fit this machine's memory (the stand-in needs little)
      scaling:
        minReplicas: 2
"""

PASTED = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: smol-chat
  profileName: local
  source:
    type: Model
    model:
      uri: hf://HuggingFaceTB/SmolLM3-3B
"""

# Five mistakes at once; the dry run must name every one of them.
MISTAKES = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: Smol_Chat
  profileName: nowhere
  syncType: Sometimes
  source:
    type: Model
    model:
      uri: hf://HuggingFaceTB/SmolLM3-3B
      scaling:
        minReplicas: -1
      serving:
        maxContext: 4096
"""
MISTAKE_PATHS = [
    "spec.name",
    "spec.profileName",
    "spec.syncType",
    "spec.source.model.scaling.minReplicas",
    "spec.source.model.serving.maxContext",
]


@pytest.fixture
def applications(channels_live_server, admin):
    """Two applications saved the way every client saves them. bge-embed deploys at once on the
    local backend (the suite's stand-in model server) and the reconciler sees it Running;
    qwen-chat has syncType Manual, so it waits for Deploy and the reconciler says so."""

    def save_and_observe():
        saved = [verbs.apply(doc, admin).application for doc in (SHORTEST, SECOND)]
        reconciler, deadline = Reconciler(), time.monotonic() + 20
        while True:
            reconciler.step()
            phases = dict(Application.objects.values_list("name", "phase"))
            if phases == {"bge-embed": Phase.RUNNING, "qwen-chat": Phase.PENDING}:
                return saved
            if time.monotonic() > deadline:
                raise AssertionError(f"the applications never settled: {phases}")
            time.sleep(0.1)

    return off_the_loop(save_and_observe)


def log_in(page: Page, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def table_names(page: Page) -> list[str]:
    return page.locator("#applications tbody tr td:first-child").all_inner_texts()


def test_log_in_dashboard_sort_application_page_log_out(page: Page, applications, admin, shoot):
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    expect(page.get_by_role("heading", name="Log in to ServeDeck")).to_be_visible()
    shoot(page, "01-login")

    log_in(page, "ada", "not-her-password")
    expect(page.get_by_role("alert")).to_contain_text("Your username and password didn't match")
    expect(page.get_by_label("Username")).to_have_value("ada")
    expect(page.get_by_label("Password")).to_have_value("")
    shoot(page, "02-login-wrong-password")

    log_in(page, "ada", "pw-ada")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Deploy model").first).to_be_visible()
    assert table_names(page) == ["bge-embed", "qwen-chat"]
    bge = page.locator("#applications tbody tr", has_text="bge-embed")
    for text in ("Running", "local", "hf://BAAI/bge-m3", "1/1"):
        expect(bge).to_contain_text(text)
    qwen = page.locator("#applications tbody tr", has_text="qwen-chat")
    for text in ("Pending", "local", "hf://Qwen/Qwen2.5-7B-Instruct", "never"):
        expect(qwen).to_contain_text(text)
    shoot(page, "03-dashboard")

    # Sorting swaps the table only: the page (and this marker) stays, the URL follows.
    page.evaluate("window.__sameDocument = true")
    header = page.locator("#applications thead").get_by_role("link", name="Name")
    for expected_url, expected_order in [
        (r"/\?sort=name$", ["bge-embed", "qwen-chat"]),
        (r"/\?sort=-name$", ["qwen-chat", "bge-embed"]),
    ]:
        with page.expect_response(re.compile(r"\?sort=")) as sorted_response:
            header.click()
        response = sorted_response.value
        assert response.request.headers.get("hx-request") == "true"
        body = response.text()
        assert body.lstrip().startswith('<div id="applications"'), body[:200]
        assert "<html" not in body and "<header" not in body
        expect(page).to_have_url(re.compile(expected_url))
        expect(page.locator("#applications tbody tr")).to_have_count(2)
        assert table_names(page) == expected_order
        header = page.locator("#applications thead").get_by_role("link", name="Name")
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#applications thead th.desc")).to_have_text(re.compile("Name"))
    shoot(page, "04-dashboard-sorted")

    # The page of the application that waits: why it is Pending, and what to do.
    page.get_by_role("link", name="qwen-chat").click()
    expect(page).to_have_url(re.compile(r"/models/qwen-chat/$"))
    expect(page.locator("header.topbar")).to_have_count(1)  # a page, not a swapped fragment
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile(r"qwen-chat\s+Pending"))
    status = page.get_by_role("region", name="Status")
    expect(status).to_contain_text("Why: Nothing has been started for qwen-chat on this machine.")
    expect(status).to_contain_text("Next step: Deploy it.")
    manifest = page.locator("#manifest-yaml")
    for line in ("name: qwen-chat", "syncType: Manual", "namespace: default", "minReplicas: 2"):
        expect(manifest).to_contain_text(line)
    history = page.get_by_role("region", name="Deploy history").locator("tbody tr")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text(re.compile(r"^\s*1\s"))
    expect(history.first).to_contain_text("ada")
    expect(history.first).to_contain_text("Waiting for Deploy")
    shoot(page, "05-application-pending")

    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Revision 1 handed to the cluster backend.")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        re.compile(r"qwen-chat\s+(Loading|Running)")
    )
    expect(history.first).to_contain_text("Applied")
    shoot(page, "06-application-deployed")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    expect(page.get_by_role("heading", name="Log in to ServeDeck")).to_be_visible()
    shoot(page, "07-logged-out")
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))


def test_deploy_model_from_yaml(page: Page, applications, shoot):
    log_in(page, "ada", "pw-ada")
    page.locator(".page-head").get_by_role("link", name="Deploy from YAML").click()
    expect(page).to_have_url(re.compile(r"/deploy/yaml/$"))
    expect(page.get_by_role("heading", name="Deploy model from YAML")).to_be_visible()
    shoot(page, "01-deploy-empty")

    textarea = page.get_by_label("Manifest (YAML or JSON)")
    dry_run = page.get_by_role("button", name="Dry run")
    result = page.get_by_role("region", name="Dry run")

    textarea.fill(PASTED)
    with page.expect_response(re.compile(r"/deploy/yaml/dry-run/$")) as answer:
        dry_run.click()
    assert answer.value.request.headers.get("hx-request") == "true"
    assert "<html" not in answer.value.text()
    expect(result).to_contain_text("Dry run passed.")
    expect(result).to_contain_text("Deploy creates the application.")
    filled = page.locator("#filled-yaml")
    for line in (
        "name: smol-chat",
        "namespace: default",
        "syncType: Auto",
        "exposure: Internal",
        "format: vLLM",
        "minReplicas: 1",
    ):
        expect(filled).to_contain_text(line)
    expect(page).to_have_url(re.compile(r"/deploy/yaml/$"))  # a fragment, not a new page
    expect(textarea).to_have_value(PASTED)
    shoot(page, "02-dry-run-passed")

    textarea.fill(MISTAKES)
    dry_run.click()
    expect(result).to_contain_text("Refused.")
    expect(result).to_contain_text(f"Fix {len(MISTAKE_PATHS)} problems")
    refusals = result.locator("li.refusal")
    expect(refusals).to_have_count(len(MISTAKE_PATHS))
    paths = refusals.locator("code").all_inner_texts()
    assert sorted(paths) == sorted(MISTAKE_PATHS)
    expect(result).to_contain_text("did you mean maxContextTokens?")
    expect(page.locator("#filled-yaml")).to_have_count(0)  # nothing to copy from a refusal
    shoot(page, "03-dry-run-refused")

    textarea.fill(PASTED)
    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page).to_have_url(re.compile(r"/models/smol-chat/$"))
    expect(page.get_by_role("status")).to_contain_text("smol-chat is saved.")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        re.compile(r"smol-chat\s+(Loading|Running)")
    )
    expect(page.locator("#manifest-yaml")).to_contain_text("hf://HuggingFaceTB/SmolLM3-3B")
    shoot(page, "04-deployed")

    page.get_by_role("link", name="Models", exact=True).first.click()
    expect(page.locator("#applications tbody tr")).to_have_count(3)
    assert table_names(page) == ["bge-embed", "qwen-chat", "smol-chat"]
    shoot(page, "05-dashboard-with-new-model")


def test_viewer_cannot_deploy(page: Page, page_problems, applications, viewer, shoot):
    log_in(page, "vera", "pw-vera")
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    assert table_names(page) == ["bge-embed", "qwen-chat"]
    expect(page.locator(".who .role")).to_have_text("viewer")
    expect(page.get_by_role("link", name="Deploy model")).to_have_count(0)
    expect(page.get_by_role("button", name="Deploy model")).to_have_count(0)
    shoot(page, "01-viewer-dashboard")

    page.get_by_role("link", name="bge-embed").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile("bge-embed"))
    for verb in ("Deploy", "Restart", "Stop", "Delete"):
        expect(page.get_by_role("button", name=verb, exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("Roll back"))).to_have_count(0)
    shoot(page, "02-viewer-application")

    page_problems.expect(r"status of 403")  # Chromium logs the 403 of the page itself
    response = page.goto("/deploy/yaml/")
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Your role in Acme is viewer")
    expect(page.get_by_label("Manifest (YAML or JSON)")).to_have_count(0)
    shoot(page, "03-viewer-deploy-403")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    shoot(page, "04-viewer-logged-out")


def test_log_in_with_the_keyboard_only(page: Page, applications, shoot):
    page.goto("/login/")
    focused = "document.activeElement && document.activeElement.id"
    assert page.evaluate(focused) == "id_username"  # autofocus: no click needed
    page.keyboard.type("ada")
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "id_password"
    page.keyboard.type("pw-ada")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Log in")).to_be_focused()
    shoot(page, "01-login-button-focused")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()

    # From the top of the dashboard, the skip link is the first stop and jumps to the content.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    shoot(page, "02-skip-link-focused", full_page=False)
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#main$"))


PHONE_WIDTH = 390


def assert_no_sideways_scroll(page: Page) -> None:
    # On a phone Chromium widens the layout viewport to fit wide content, so compare the
    # document with the phone's width, not with window.innerWidth.
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE_WIDTH, f"{page.url} is {width}px wide on a {PHONE_WIDTH}px screen"


@pytest.mark.browser_context_args(
    viewport={"width": PHONE_WIDTH, "height": 844}, is_mobile=True, has_touch=True
)
def test_dashboard_on_a_narrow_screen(page: Page, applications, shoot):
    log_in(page, "ada", "pw-ada")
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()
    expect(page.locator("#applications tbody tr")).to_have_count(2)
    assert page.evaluate("window.innerWidth") == PHONE_WIDTH
    assert_no_sideways_scroll(page)
    # The table is wider than the phone: it scrolls inside its own box, the page does not.
    wrap = page.locator("#applications")
    assert wrap.evaluate("el => el.scrollWidth > el.clientWidth")
    shoot(page, "01-dashboard-390px")

    page.get_by_role("link", name="qwen-chat").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile("qwen-chat"))
    assert_no_sideways_scroll(page)
    shoot(page, "02-application-390px")
