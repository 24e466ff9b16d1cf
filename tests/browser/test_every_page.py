"""Every console page, on a laptop (1366 x 768) and on a phone (390 x 844), as an org admin with
a little of everything present: the page is never wider than the screen, the browser reports no
error, and axe-core finds nothing serious or critical. A screenshot of each page is saved.

The pages come from the URL walk's table (tests/console/test_url_walk.py): each route there that
answers GET is either visited below or skipped with its reason, so a new page cannot go
unchecked without someone saying why.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, Page, expect

from accesspolicies import domains, keys, members, policies
from accesspolicies.models import PersonalAccessToken
from jobs import deploy as verbs
from jobs.models import Application, Phase
from jobs.reconciler import Reconciler
from jobs.wizard import drafts as wizard_drafts
from models_catalog.models import ModelMaster
from tests.browser.support import off_the_loop
from tests.console.test_url_walk import PAGES
from tests.helpers import SHORTEST

pytestmark = pytest.mark.browser


def saved_draft(membership, manifest: dict):
    return wizard_drafts.save(wizard_drafts.unsaved_draft(membership, manifest), manifest)


VIEWPORTS = {"1366px": {"width": 1366, "height": 768}, "390px": {"width": 390, "height": 844}}


# Who opens a page: nobody (logged out), ada (acme's admin, where everything is), or otto
# (globex's admin, whose organisation is empty: the empty states).
LOGGED_OUT, ADA, OTTO = "", "ada", "otto"


@dataclass(frozen=True)
class Visit:
    """One page to open: a label for reports and screenshots, its URL (placeholders filled from
    the data the test makes), who opens it, and what is done on it before it is checked (to
    show the fragments a page fetches as it is used)."""

    label: str
    url: str
    user: str = ADA
    status: int = 200
    then: Callable[[Page], None] | None = None


SLOW = 15_000  # ms: what a fragment may take on a busy machine


def type_a_bad_name_and_search_the_hub(page: Page) -> None:
    """The Model step's name check (deploy/name/) and Hub results (deploy/hub/)."""
    page.get_by_label("Name").fill("Qwen_Chat")
    expect(page.locator("#name-status .error")).to_be_visible(timeout=SLOW)
    page.get_by_label("Hugging Face model").press_sequentially("qwen")
    expect(page.locator("#hub-results .hub-pick").first).to_be_visible(timeout=SLOW)


def pick_from_the_hub(page: Page) -> None:
    """The Model step once a Hub result is picked (deploy/hub/pick/)."""
    type_a_bad_name_and_search_the_hub(page)
    page.locator("#hub-results .hub-pick").first.click()
    expect(page.get_by_label("Revision")).to_have_value(re.compile(r"^[0-9a-f]{40}$"), timeout=SLOW)


def change_the_context_window(page: Page) -> None:
    """Compute's GPU tiles and memory figure, fetched again as a size changes."""
    with page.expect_response(re.compile(r"/compute/memory/")):
        page.get_by_label("Context window (tokens)").fill("4096")
    expect(page.locator("#memory-needed")).to_contain_text("4096 tokens", timeout=SLOW)


def dry_run(manifest: str) -> Callable[[Page], None]:
    """Deploy from YAML with the dry run's answer for `manifest` below it."""

    def run(page: Page) -> None:
        page.get_by_label("Manifest (YAML or JSON)").fill(manifest)
        page.get_by_role("button", name="Dry run").click()
        expect(page.get_by_role("region", name="Dry run")).to_be_visible(timeout=SLOW)

    return run


DRY_RUN_PASSES = SHORTEST.replace("bge-embed", "bge-yaml")
DRY_RUN_REFUSED = SHORTEST.replace("bge-embed", "Bge_Yaml").replace("local", "nowhere")


# Route (as the URL walk spells it) -> the pages that show it.
VISITS: dict[str, list[Visit]] = {
    "login/": [Visit("login", "/login/", user=LOGGED_OUT)],
    "password/change/": [Visit("password-change", "/password/change/")],
    "password/change/done/": [Visit("password-change-done", "/password/change/done/")],
    "password/set/<uidb64>/<token>/": [
        Visit("password-set-invalid-link", "/password/set/MQ/not-a-token/", user=LOGGED_OUT)
    ],
    "": [Visit("models", "/"), Visit("models-empty", "/", user=OTTO)],
    "models/<slug:name>/": [
        Visit("application-running", "/models/bge-embed/"),
        Visit("application-waiting-for-deploy", "/models/qwen-chat/"),
        Visit("application-failed", "/models/crashy/"),
    ],
    "models/<slug:name>/health/": [Visit("application-health", "/models/bge-embed/health/")],
    "models/<slug:name>/edit/": [Visit("application-edit", "/models/bge-embed/edit/")],
    "models/<slug:name>/logs/": [Visit("application-logs", "/models/bge-embed/logs/")],
    "models/<slug:name>/diff/": [
        Visit("application-diff", "/models/bge-embed/diff/?from=1&to=1"),
        Visit("application-diff-refused", "/models/bge-embed/diff/?from=9", status=400),
    ],
    "deploy/yaml/": [
        Visit("deploy-yaml", "/deploy/yaml/"),
        Visit("deploy-yaml-dry-run-passed", "/deploy/yaml/", then=dry_run(DRY_RUN_PASSES)),
        Visit("deploy-yaml-dry-run-refused", "/deploy/yaml/", then=dry_run(DRY_RUN_REFUSED)),
    ],
    "deploy/": [
        Visit("wizard-start-with-drafts", "/deploy/"),
        Visit("wizard-start-empty", "/deploy/", user=OTTO),
    ],
    "deploy/drafts/<slug:key>/": [Visit("wizard-resume", "/deploy/drafts/{draft}/")],
    "deploy/drafts/<slug:key>/model/": [
        Visit("wizard-model", "/deploy/drafts/{draft}/model/"),
        Visit("wizard-model-empty-draft", "/deploy/drafts/{empty_draft}/model/"),
        Visit(
            "wizard-model-hub-results",
            "/deploy/drafts/{empty_draft}/model/",
            then=type_a_bad_name_and_search_the_hub,
        ),
        Visit(
            "wizard-model-hub-picked",
            "/deploy/drafts/{empty_draft}/model/",
            then=pick_from_the_hub,
        ),
    ],
    "deploy/drafts/<slug:key>/check/": [Visit("wizard-check", "/deploy/drafts/{draft}/check/")],
    "deploy/drafts/<slug:key>/compute/": [
        Visit("wizard-compute", "/deploy/drafts/{draft}/compute/"),
        Visit(
            "wizard-compute-resized",
            "/deploy/drafts/{draft}/compute/",
            then=change_the_context_window,
        ),
    ],
    "deploy/drafts/<slug:key>/access/": [Visit("wizard-access", "/deploy/drafts/{draft}/access/")],
    "deploy/drafts/<slug:key>/api/": [Visit("wizard-api", "/deploy/drafts/{draft}/api/")],
    "deploy/drafts/<slug:key>/review/": [Visit("wizard-review", "/deploy/drafts/{draft}/review/")],
    "clusters/": [Visit("clusters", "/clusters/")],
    "clusters/add/": [Visit("cluster-add", "/clusters/add/")],
    "clusters/<slug:name>/": [
        Visit("cluster-local", "/clusters/local/"),
        Visit("cluster-kubernetes", "/clusters/acme-gpu/"),
    ],
    "profiles/add/": [Visit("profile-add", "/profiles/add/")],
    "profiles/<slug:name>/": [Visit("profile-local", "/profiles/local/")],
    "access/members/": [Visit("members", "/access/members/")],
    "access/tokens/": [
        Visit("tokens", "/access/tokens/"),
        Visit("tokens-empty", "/access/tokens/", user=OTTO),
    ],
    "catalog/check/": [
        Visit("check-model", "/catalog/check/"),
        Visit("check-model-result", "/catalog/check/?uri=hf://BAAI/bge-m3&profile=local"),
    ],
    "catalog/masters/": [
        Visit("model-masters", "/catalog/masters/"),
        Visit("model-masters-empty", "/catalog/masters/", user=OTTO),
    ],
    "catalog/masters/add/": [Visit("model-master-add", "/catalog/masters/add/")],
    "catalog/masters/recipe/": [Visit("model-master-recipe", "/catalog/masters/recipe/")],
    "catalog/masters/<str:slug>/": [Visit("model-master-edit", "/catalog/masters/{master}/")],
    "access/audit/": [Visit("audit", "/access/audit/")],
    "access/domains/": [
        Visit("domains", "/access/domains/"),
        Visit("domains-empty", "/access/domains/", user=OTTO),
    ],
    "access/keys/": [
        Visit("api-keys", "/access/keys/"),
        Visit("api-keys-empty", "/access/keys/", user=OTTO),
    ],
    "access/policies/": [
        Visit("policies", "/access/policies/"),
        Visit("policies-empty", "/access/policies/", user=OTTO),
    ],
    "access/policies/<str:name>/": [Visit("policy-edit", "/access/policies/chat-callers/")],
    "access/join/<str:token>/": [
        Visit("join-signed-in", "/access/join/{invitation}/"),
        Visit("join-sign-up", "/access/join/{invitation}/", user=LOGGED_OUT),
    ],
}
# Pages no route names: what any unknown address shows.
EXTRA_VISITS = [Visit("not-found", "/no-such-page/", status=404)]

# Routes that answer GET but are not console pages, and why.
SKIPPED: dict[str, str] = {
    "api/v1/": "the API's root answers a JSON 404",
    "api/v1/openapi.json": "JSON, not a page",
    "models/<slug:name>/charts/": "the overview's chart data, JSON: application-running draws it",
    "favicon.ico": "a redirect to the icon in static/console",
    "api/v1/docs": "django-ninja's packaged Swagger UI, markup not ours (test_hardening shows it)",
    "deploy/name/": "a fragment of the Model step: wizard-model-hub-results shows it there",
    "deploy/hub/": "a fragment of the Model step: wizard-model-hub-results shows it there",
    "deploy/hub/pick/": "a fragment of the Model step: wizard-model-hub-picked shows it there",
    "deploy/drafts/<slug:key>/compute/memory/": "a fragment of Compute: wizard-compute-resized",
    "deploy/drafts/<slug:key>/manifest.yaml": "a YAML download, not a page",
}


def get_routes() -> set[str]:
    """The URL walk's routes that answer GET for someone: not 405 for every member (anonymous
    visitors are sent to log in first, whatever the method)."""
    return {
        route
        for route, methods in PAGES.items()
        if "GET" in methods and set(methods["GET"].split()[1:]) != {"405"}
    }


def test_every_page_route_is_visited_or_skipped_with_a_reason():
    routes = get_routes()
    missing = sorted(routes - set(VISITS) - set(SKIPPED))
    assert not missing, (
        f"pages test_every_page.py does not open: {missing}; add each to VISITS (with the "
        "data it needs) or to SKIPPED with the reason"
    )
    both = sorted(set(VISITS) & set(SKIPPED))
    assert not both, f"routes both visited and skipped: {both}"
    gone = sorted((set(VISITS) | set(SKIPPED)) - routes)
    assert not gone, f"entries for routes that no longer answer GET: {gone}; remove them"


CRASHING = SHORTEST.replace("bge-embed", "crashy") + (
    "      engine:\n        extraArgs: [--fail-on-start]\n"
)
WAITING = """\
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
SETTLED = {"bge-embed": Phase.RUNNING, "qwen-chat": Phase.PENDING, "crashy": Phase.FAILED}


@pytest.fixture
def console_with_everything(channels_live_server, admin, deployer, viewer, outsider):
    """acme with an application Running, one waiting for Deploy and one Failed; drafts, members,
    an invitation, API keys, a policy, a domain, tokens, a model master, a Kubernetes cluster,
    and the audit entries all of that leaves. Returns the values the URLs need."""
    from jobs.models import Cluster, Profile

    org = admin.organization

    def make():
        for doc in (SHORTEST, WAITING, CRASHING):
            verbs.apply(doc, admin)
        reconciler, deadline = Reconciler(), time.monotonic() + 30
        while True:
            reconciler.step()
            phases = dict(Application.objects.values_list("name", "phase"))
            if phases == SETTLED:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the applications never settled: {phases}, expected {SETTLED}")
            time.sleep(0.1)
        gpu = Cluster.objects.create(
            organization=org,
            name="acme-gpu",
            backend=Cluster.Backend.KUBERNETES,
            kubeconfig_path="/etc/servedeck/kubeconfig",
            context="gpu-prod",
            addons=["kserve"],
        )
        Profile.objects.create(organization=org, name="acme-gpu", cluster=gpu, namespace="ml")
        drafts = []
        for name, uri in [
            ("bge-draft", "hf://BAAI/bge-m3"),
            ("qwen-small", "hf://Qwen/Qwen2.5-0.5B-Instruct"),
        ]:
            text = SHORTEST.replace("bge-embed", name).replace("hf://BAAI/bge-m3", uri)
            drafts.append(saved_draft(admin, yaml.safe_load(text)))
        empty = saved_draft(admin, {})  # as an earlier console could leave one
        keys.create(org, "chat-app", ["bge-embed"], rpm=60, actor=admin)
        keys.create(org, "batch-jobs", None, tpm=100000, expires_in=30, actor=admin)
        policies.create(
            org,
            "chat-callers",
            ["chat-app"],
            rpm=120,
            allowed_networks=["10.0.0.0/8"],
            actor=admin,
        )
        domains.add(org, "models.acme.example", actor=admin)
        _, invitation = members.invite(org, "deployer", "for the data team", actor=admin)
        PersonalAccessToken.issue(admin.user, org, "laptop")
        PersonalAccessToken.issue(admin.user, org, "ci-pipeline")
        master = ModelMaster.objects.create(
            organization=org,
            model_id="Qwen/Qwen2.5-7B-Instruct",
            dtype="bfloat16",
            max_context_tokens=32768,
            extra_args=["--enable-prefix-caching"],
            notes="Chat default for the support team.",
        )
        return {
            "draft": drafts[0].key,
            "empty_draft": empty.key,
            "invitation": invitation,
            "master": master.slug,
        }

    values = off_the_loop(make)
    return channels_live_server, values


def log_in(page: Page, username: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Models", exact=True)).to_be_visible()


def visits() -> list[Visit]:
    return [visit for route in VISITS for visit in VISITS[route]] + EXTRA_VISITS


def problems_of(page: Page, visit: Visit, url: str, width: int, axe) -> list[str]:
    """What is wrong with the page at `url` on a screen `width` pixels wide."""
    errors: list[str] = []
    # Chromium reports a page's own error status (the 404 page's) as a console error too.
    own_status = f"the server responded with a status of {visit.status}"

    def on_console(message):
        if message.type != "error":
            return
        if own_status in message.text and message.location.get("url") == page.url:
            return
        errors.append(f"console error: {message.text} ({message.location.get('url')})")

    def on_page_error(error):
        errors.append(f"page error: {error}")

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    try:
        # No page fetches more of itself once loaded (no hx-trigger="load"), so load is enough.
        response = page.goto(url, wait_until="load")
        found = []
        if response is None or response.status != visit.status:
            got = "no response" if response is None else response.status
            found.append(f"answered {got}, expected {visit.status}")
        if visit.then is not None:
            visit.then(page)
        found += errors
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        if scroll_width > width:
            found.append(
                f"the page is {scroll_width}px wide on a {width}px screen; widest: "
                + page.evaluate(WIDEST_ELEMENTS, width)
            )
        # An empty table's one line (tr.empty) is read without scrolling the table sideways.
        cut = page.evaluate(CUT_EMPTY_STATES, width)
        if cut:
            found.append(f"an empty table's text runs past the screen's edge: {cut}")
        found += axe(page)
        return found
    finally:
        page.remove_listener("console", on_console)
        page.remove_listener("pageerror", on_page_error)


CUT_EMPTY_STATES = """width => [...document.querySelectorAll('tr.empty > td')]
  .filter(td => td.getBoundingClientRect().right > width + 1)
  .map(td => td.textContent.trim()).join('; ')"""

# Names the deepest elements sticking out past the screen's right edge, outside any box that
# scrolls or clips them: where to look first.
WIDEST_ELEMENTS = """width => {
  const clipped = el => {
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== 'visible') return true;
    }
    return false;
  };
  const sticksOut = el => el.getBoundingClientRect().right + window.scrollX > width + 1;
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    // A box past the edge with nothing inside it past the edge, or text running out of its box.
    const textOut = el.clientWidth > 0 && getComputedStyle(el).overflowX === 'visible'
      && el.getBoundingClientRect().left + window.scrollX + el.scrollWidth > width + 1
      && [...el.childNodes].some(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    if (clipped(el) || !(textOut || (sticksOut(el) && ![...el.children].some(sticksOut)))) continue;
    const id = el.id ? '#' + el.id : '';
    const cls = el.classList.length ? '.' + [...el.classList].join('.') : '';
    const right = Math.round(el.getBoundingClientRect().right + window.scrollX);
    const text = (el.textContent || '').trim().slice(0, 30);
    out.push(`${el.tagName.toLowerCase()}${id}${cls} "${text}" (right edge ${right}px)`);
  }
  return out.slice(0, 5).join(', ') || 'none found';
}"""


def test_every_page_fits_the_screen_and_passes_axe(
    browser: Browser, console_with_everything, axe_violations, pytestconfig
):
    server, values = console_with_everything
    # pytest-playwright's output folder (test-results/, emptied as each run starts; gitignored).
    screenshots = Path(pytestconfig.getoption("--output")) / "every-page"
    screenshots.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    for size, viewport in VIEWPORTS.items():
        context = browser.new_context(
            base_url=server.url, viewport=viewport, locale="en-GB", timezone_id="UTC"
        )
        try:
            page = context.new_page()
            page.set_default_timeout(15_000)
            user = LOGGED_OUT
            # Logged out first, then one login per user.
            for visit in sorted(visits(), key=lambda v: (LOGGED_OUT, ADA, OTTO).index(v.user)):
                if visit.user != user:
                    context.clear_cookies()
                    log_in(page, visit.user)
                    user = visit.user
                url = visit.url.format(**values)
                found = problems_of(page, visit, url, viewport["width"], axe_violations)
                shot = screenshots / f"{visit.label}--{size}.png"
                page.screenshot(path=str(shot), full_page=True)
                report += [f"{visit.label} at {size} ({url}): {problem}" for problem in found]
        finally:
            context.close()
    assert not report, f"{len(report)} problems:\n" + "\n".join(report)


def test_axe_names_each_serious_violation_with_its_rule_impact_and_element(
    browser: Browser, axe_violations
):
    """The check above can fail: a page with an unnamed button and an image without a text
    alternative is reported, rule by rule, with the elements to fix."""
    page = browser.new_page()
    broken = (
        '<!doctype html><html lang="en"><head><title>t</title></head><body><main>'
        '<h1>Broken</h1><button id="nameless"></button><img id="no-alt" src="data:,">'
        "</main></body></html>"
    )
    # A page at an address of its own (a blank page has none to serve axe from), never fetched.
    address = "http://127.0.0.1:9/broken/"
    page.route(address, lambda route: route.fulfill(body=broken, content_type="text/html"))
    try:
        page.goto(address)
        found = axe_violations(page)
    finally:
        page.close()
    for rule, element in [("button-name", "#nameless"), ("image-alt", "#no-alt")]:
        line = f"axe {rule} (critical)"
        assert any(f.startswith(line) and element in f for f in found), (line, element, found)
