"""Browser tests: Debian's Chromium through pytest-playwright against a Daphne live server.

Everything here stays in tests/browser: Playwright's sync API keeps an asyncio loop marked as
running in the main thread while it is started, which would break ORM calls and asyncio tests
elsewhere, so Playwright lives for one test module at a time, not for the whole session.
"""

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import weakref
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
from playwright.sync_api import Browser, BrowserType, Page, Playwright, sync_playwright

from tests.live_server import console_process

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Off the network: no QUIC, and no name resolves except loopback.
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
# Images never go into the repository.
SCREENSHOT_DIR = Path(os.environ.get("SCREENSHOT_DIR") or "/tmp/servedeck-screenshots")


def pytest_collection_modifyitems(config, items):
    """Give the live server a database file when browser tests are about to run.

    The live server is a forked process: it cannot see an in-memory SQLite database that the
    test process writes after the fork, so the SQLite test database becomes a temporary file
    (decided after collection, before any test creates the database).
    """
    if not any(item.get_closest_marker("browser") for item in items):
        return
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    test_settings = settings_dict.setdefault("TEST", {})
    if settings_dict["ENGINE"].endswith("sqlite3") and not test_settings.get("NAME"):
        folder = tempfile.mkdtemp(prefix="servedeck-browser-db-")
        config.add_cleanup(partial(shutil.rmtree, folder, ignore_errors=True))
        test_settings["NAME"] = str(Path(folder) / "test.sqlite3")


@pytest.fixture(autouse=True)
def _allow_orm_beside_playwright():
    """Playwright's sync API marks an asyncio loop as running in this thread; the ORM refuses
    to run then unless told. Only browser tests set this, and only while they run."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def channels_live_server(transactional_db, django_db_blocker):
    """Daphne (HTTP, WebSockets and static files) serving the console in a forked process.

    One server per test, forked after the test's own setup (autouse fixtures included), so it
    runs with exactly the settings the test runs with: tests/conftest.py sets the password
    hasher, the local backend's stand-in model server and its state folder per test. The
    server reads the test database; rows reach it once committed, hence `transactional_db`.
    """
    with console_process(django_db_blocker) as url:
        yield SimpleNamespace(url=url, ws_url="ws" + url.removeprefix("http"))


# pytest-playwright's own fixtures, narrowed from session to module scope (see the docstring);
# browser_context_args follows the live server, one per test.


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's Chromium, never a downloaded browser, kept off the network."""
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": CHROMIUM_ARGS,
        "timeout": 30_000,
    }


def _playwright_drivers() -> list[int]:
    """The pids of this process's Playwright drivers (node, a child of this process)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == os.getpid() and b"playwright/driver" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def playwright(_pw_api_request_contexts):
    pw = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(pw)
    drivers = _playwright_drivers()
    yield pw
    # stop() waits for the driver to exit; on a loaded CI machine it once never did (no browser
    # left, the suite stalled for minutes). Past 60 s the driver is killed, which ends the wait.
    watchdog = threading.Timer(60, _kill, [drivers])
    watchdog.start()
    try:
        pw.stop()
    finally:
        watchdog.cancel()


@pytest.fixture(scope="module")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name)


@pytest.fixture(scope="module")
def launch_browser(browser_type_launch_args, browser_type: BrowserType):
    def launch(**kwargs) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture(scope="module")
def browser(launch_browser):
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture
def browser_context_args(channels_live_server):
    return {
        "base_url": channels_live_server.url,
        "viewport": {"width": 1280, "height": 800},
        "locale": "en-GB",
        "timezone_id": "UTC",
    }


class PageProblems:
    """Console errors and uncaught page errors seen by the pages a test watches."""

    def __init__(self):
        self.seen: list[str] = []
        self.expected: list[re.Pattern] = []

    def watch(self, page: Page) -> Page:
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.seen.append(f"page error: {error}"))
        return page

    def _on_console(self, message) -> None:
        if message.type == "error":
            self.seen.append(f"console error: {message.text} ({message.location.get('url')})")

    def expect(self, pattern: str) -> None:
        """Allow errors matching `pattern` (a deliberate 403, say) for the rest of the test."""
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [m for m in self.seen if not any(p.search(m) for p in self.expected)]


@pytest.fixture
def page_problems() -> PageProblems:
    return PageProblems()


@pytest.fixture
def page(page: Page, page_problems: PageProblems) -> Page:
    """pytest-playwright's page, watched for console and page errors."""
    page.set_default_timeout(10_000)
    return page_problems.watch(page)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A console error or uncaught exception on a watched page fails the test itself."""
    result = yield
    problems = item.funcargs.get("page_problems")
    if problems is not None and problems.unexpected():
        raise AssertionError("the browser reported errors:\n" + "\n".join(problems.unexpected()))
    return result


@pytest.fixture
def shoot(request):
    """Save a full-page screenshot named after the test and the step; returns its path."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)

    def _shoot(page: Page, step: str, full_page: bool = True) -> Path:
        path = SCREENSHOT_DIR / f"{prefix}--{step}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return _shoot


# axe-core from the npm registry, pinned in tests/browser/package-lock.json; scripts/test.sh
# installs it (`npm ci` in tests/browser) when it is missing. Never fetched from a CDN.
AXE_SCRIPT = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
# What the every-page test refuses; moderate and minor findings are left to judgement.
AXE_REFUSED_IMPACTS = ("serious", "critical")
AXE_RUN = """async () => {
  // axe's default rules (WCAG 2 A and AA, and its best practices); only violations are needed.
  const results = await axe.run(document, {resultTypes: ['violations']});
  return results.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.map(n => n.target.join(' ')),
  }));
}"""


# The console's Content-Security-Policy refuses inline scripts, which is what
# add_script_tag(path=...) would insert; rather than turn the policy off for the test (and miss
# what it would refuse), axe is served from the local file at a same-origin address only the
# test's browser knows, and added as a script with that address.
AXE_URL = "/__browser-tests__/axe.min.js"


@pytest.fixture(scope="session")
def axe_violations():
    """A function of a page: axe-core injected from the local file, then run; returns one line
    per serious or critical violation (rule id, impact, what it asks, the elements)."""
    if not AXE_SCRIPT.exists():
        pytest.fail(
            f"axe-core is not installed at {AXE_SCRIPT}: run scripts/test.sh, or "
            "`npm ci --no-audit --no-fund` in tests/browser"
        )

    routed = weakref.WeakSet()

    def serve_axe(route) -> None:
        route.fulfill(path=AXE_SCRIPT, content_type="text/javascript")

    def run(page: Page) -> list[str]:
        if page not in routed:
            page.route(f"**{AXE_URL}", serve_axe)
            routed.add(page)
        if not page.evaluate("typeof window.axe !== 'undefined'"):
            page.add_script_tag(url=AXE_URL)
        found = page.evaluate(AXE_RUN)
        return [
            f"axe {v['id']} ({v['impact']}): {v['help']}: {', '.join(v['targets'][:6])}"
            + (f" and {len(v['targets']) - 6} more" if len(v["targets"]) > 6 else "")
            for v in found
            if v["impact"] in AXE_REFUSED_IMPACTS
        ]

    return run
