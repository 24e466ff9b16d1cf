"""An application on the local backend, end to end: the verbs start a (stand-in) model server,
the reconciler follows it to Running, and restart, stop, start, a crash and delete each do
what docs/manifest.md says."""

import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from jobs import deploy as verbs
from jobs.backends.local import runtimes as rt
from jobs.backends.local.backend import local_runner
from jobs.lifecycle import group_name
from jobs.models import Application, Event
from jobs.reconciler import Reconciler
from tests.helpers import SHORTEST


def until(application, phase, timeout=15.0):
    reconciler = Reconciler()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconciler.step_local()
        application.refresh_from_db()
        if application.phase == phase:
            return application
        time.sleep(0.1)
    raise AssertionError(
        f"{application.name} is {application.phase}, not {phase}: {application.reason}"
    )


@pytest.fixture
def app(deployer):
    return verbs.apply(SHORTEST, deployer).application


def pids(application):
    return [r.pid for r in local_runner("acme").observe(application.name).replicas]


def test_deploy_comes_up_running_with_an_endpoint(app):
    assert app.phase in ("Loading", "Running")
    until(app, "Running")
    assert app.endpoint.startswith("http://127.0.0.1:")
    assert app.runtime == ""  # SERVEDECK_LOCAL_COMMAND's server: the manifest's engine holds
    assert app.served_at is not None
    assert (app.ready_replicas, app.desired_replicas) == (1, 1)
    models = httpx.get(app.endpoint + "/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["bge-embed"]
    assert Event.objects.filter(application=app, reason="Running").exists()


def test_restart_replaces_the_server(app, deployer):
    until(app, "Running")
    before = pids(app)
    verbs.restart(app, deployer)
    until(app, "Running")
    assert pids(app) != before


def test_stop_frees_the_machine_and_start_brings_it_back(app, deployer):
    until(app, "Running")
    verbs.stop(app, deployer)
    until(app, "Stopped")
    assert all(
        r.pid is None or r.state != "running"
        for r in local_runner("acme").observe(app.name).replicas
    )
    verbs.start(app, deployer)
    until(app, "Running")


def test_a_crash_is_failed_with_its_last_log_lines(deployer):
    crashing = SHORTEST + "      engine:\n        extraArgs: [--crash-after, '0.3']\n"
    application = verbs.apply(crashing, deployer).application
    until(application, "Failed")
    assert "exit" in application.reason.lower()
    assert application.next_step
    warning = Event.objects.filter(application=application, kind="Warning").first()
    assert warning is not None


def test_rollback_serves_the_earlier_revision(app, deployer):
    until(app, "Running")
    verbs.apply(SHORTEST + "      serving:\n        maxConcurrentRequests: 4\n", deployer)
    applied = verbs.rollback(app, 1, deployer)
    assert applied.revision.number == 3
    until(app, "Running")
    assert local_runner("acme").observe(app.name).revision == 3


def test_delete_stops_everything(app, deployer):
    until(app, "Running")
    endpoint = app.endpoint
    verbs.delete(app, deployer)
    assert not Application.objects.exists()
    assert "bge-embed" not in local_runner("acme").applications()
    with pytest.raises(httpx.HTTPError):
        httpx.get(endpoint + "/v1/models", timeout=1)


def test_status_changes_reach_the_channel_layer(app, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(app), channel)
    # Statuses are announced once committed; the test's transaction commits nothing, so its
    # commit callbacks are run as they are registered.
    with django_capture_on_commit_callbacks(execute=True):
        until(app, "Running")
    messages = []
    while True:
        try:
            messages.append(async_to_sync(_receive)(layer, channel))
        except TimeoutError:
            break
    statuses = [m for m in messages if m["type"] == "application.status"]
    assert any(m["phase"] == "Running" and m["endpoint"] for m in statuses), messages


async def _receive(layer, channel):
    import asyncio

    return await asyncio.wait_for(layer.receive(channel), timeout=0.5)


def test_each_organisation_has_its_own_model_servers(app, outsider):
    until(app, "Running")
    theirs = verbs.apply(SHORTEST, outsider).application  # the same name, another organisation
    until(theirs, "Running")
    assert theirs.endpoint != app.endpoint
    verbs.delete(theirs, outsider)
    assert local_runner("acme").observe(app.name).phase == "Running"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ("[--trust-remote-code]", "--trust-remote-code"),
        ("[--trust_remote_code]", "--trust-remote-code"),
        ("[--trust-remote-code=true]", "--trust-remote-code"),
        ("[--trust-remote]", "--trust-remote-code"),
        ("[--host=0.0.0.0]", "--host"),
        ("[--hos, 0.0.0.0]", "--host"),
        ("[--download_dir=/etc]", "--download-dir"),
    ],
)
def test_engine_flags_are_read_as_vllm_reads_them_at_the_dry_run(org, args, flag):
    text = SHORTEST + f"      engine:\n        extraArgs: {args}\n"
    run = verbs.dry_run(text, org)
    assert not run.ok
    refusal = run.refusals[0]
    assert refusal.path == "spec.source.model.engine.extraArgs[0]"
    assert f"is read as {flag}," in refusal.message


def test_without_vllm_the_dry_run_names_the_cpu_runtime_to_install(
    org, settings, monkeypatch, tmp_path
):
    settings.SERVEDECK_LOCAL_COMMAND = ""  # the default: vLLM's own server
    settings.SERVEDECK_RUNTIMES_DIR = tmp_path / "runtimes"  # no CPU runtime installed
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without vllm
    run = verbs.dry_run(SHORTEST, org)
    (message,) = [p.message for p in run.refusals]
    assert message.startswith(
        "Embeddings on this machine needs the CPU runtime infinity-emb, which is not installed"
    )
    command = rt.install_command("infinity", tmp_path / "runtimes")
    assert f"Install it with: {command}" in message


def test_the_dry_run_refuses_more_replicas_than_this_machine_holds(org, deployer):
    """25 processes in a second was what minReplicas: 2147483647 started; now nothing does."""
    huge = SHORTEST + "      scaling:\n        minReplicas: 2147483647\n"
    run = verbs.dry_run(huge, org)
    assert not run.ok
    message = " ".join(str(p) for p in run.refusals)
    assert "minReplicas is 2.15e+09" in message and "core(s)" in message
    assert "Set scaling.minReplicas to" in message
    with pytest.raises(verbs.Refused):
        verbs.apply(huge, deployer)
    assert local_runner("acme").applications() == []
