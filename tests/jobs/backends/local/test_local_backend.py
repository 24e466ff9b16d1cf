"""The local backend: model servers as processes on this machine, run against the stand-in
server (tests/fakes/model_server.py) through the command template, called with the official
`openai` client. Every test checks that no server it started is left running."""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import struct
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from jobs.backends.local import processes as proc
from jobs.backends.local.command import (
    DEFAULT_TEMPLATE,
    TemplateError,
    configured_template,
    local_env,
    server_environment,
)
from jobs.backends.local.machine_check import (
    MODEL,
    Machine,
    capacity_refusals,
    machine,
    parse_gpu_list,
)
from jobs.backends.local.runner import (
    FAILED,
    LOADING,
    PENDING,
    RUNNING,
    STOPPED,
    VLLM_MISSING,
    LocalRefused,
    LocalRunner,
    UnknownApplication,
    check,
    derive_status,
    local_command,
)
from jobs.backends.local.state import AppState, Replica
from jobs.manifest import ManifestContext, ProfileFacts, parse
from jobs.manifest.engine_flags import parse_extra_flags
from tests.helpers import STAND_IN_FLAGS

FAKE_SERVER = Path(__file__).resolve().parents[3] / "fakes" / "model_server.py"
COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"
CONTEXT = ManifestContext(
    profiles={"local": ProfileFacts(name="local", namespace="default", backend="local")},
    extra_engine_flags=parse_extra_flags(STAND_IN_FLAGS),
)
WAIT_SECONDS = 10.0
PYTHON = sys.executable  # some tests point sys.executable elsewhere


def manifest(name: str = "chat", **model: Any) -> dict[str, Any]:
    """A filled-in manifest for the local profile; `model` overrides spec.source.model."""
    doc = {
        "apiVersion": "servedeck.io/v1",
        "kind": "Application",
        "spec": {
            "name": name,
            "profileName": "local",
            "source": {"type": "Model", "model": {"uri": "hf://Qwen/Qwen3-0.6B", **model}},
        },
    }
    result = parse(doc, CONTEXT)
    assert result.ok, result.refusals
    return result.manifest


def stand_in(tag: Path, startup_delay: float = 0.1) -> str:
    """The command template that runs the stand-in; `tag` marks this test's processes."""
    return (
        f"{shlex.quote(PYTHON)} {shlex.quote(str(FAKE_SERVER))} --port {{port}} "
        f"--served-model-name {{name}} --startup-delay {startup_delay} "
        f"--test-tag {shlex.quote(str(tag))} {{args}}"
    )


def servers_tagged(tag: Path) -> list[int]:
    """Live (non-zombie) stand-in servers whose command line carries `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and proc.proc_stat(pid) and str(tag) in (proc.proc_cmdline(pid) or []):
            found.append(pid)
    return found


def running(pid: int | None) -> bool:
    return pid is not None and proc.proc_stat(pid) is not None


def wait_for(runner: LocalRunner, app: str, phase: str) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    status = runner.observe(app)
    while status.phase != phase and time.monotonic() < deadline:
        time.sleep(0.05)
        status = runner.observe(app)
    assert status.phase == phase, status
    return status


@pytest.fixture
def tag(tmp_path: Path) -> Path:
    return tmp_path / "local"


@pytest.fixture
def runner(tag: Path):
    """A runner on the stand-in; afterwards, none of its servers may be running."""
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0, probe_timeout=0.5)
    yield runner
    runner.shutdown()
    assert servers_tagged(tag) == []


def client_for(endpoint: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{endpoint}/v1", api_key="not-checked", max_retries=0)


# --- the command line: pure, table-driven ------------------------------------------------------

VLLM_HEAD = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", "8000"]


@pytest.mark.parametrize(
    ("model", "expected_args"),
    [
        pytest.param(
            {},
            ["--dtype", "auto", "--tensor-parallel-size", "1", "--max-num-seqs", "2"],
            id="cpu-defaults",
        ),
        pytest.param(
            {
                "uri": f"hf://Qwen/Qwen3-0.6B:{COMMIT}",
                "engine": {
                    "dtype": "bfloat16",
                    "quantization": "fp8",
                    "reasoningParser": "qwen3",
                    "toolCallParser": "hermes",
                    "extraArgs": ["--enforce-eager", "--response-role=$(rm -rf ~) ; x"],
                },
                "serving": {"maxContextTokens": 8192, "maxConcurrentRequests": 8},
                "resources": {"cpu": "4"},
            },
            [
                "--revision", COMMIT, "--dtype", "bfloat16", "--quantization", "fp8",
                "--tensor-parallel-size", "1", "--max-model-len", "8192", "--max-num-seqs", "8",
                "--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
                "--tool-call-parser", "hermes",
                "--enforce-eager", "--response-role=$(rm -rf ~) ; x",
            ],
            id="pinned-engine-parsers-extra-args",
        ),
        pytest.param(
            {
                "resources": {"accelerator": {"gpu": {"countPerReplica": 2}}},
                "engine": {"gpuMemoryUtilization": 0.8},
                "serving": {"kvCacheSize": "10Gi"},
            },
            [
                "--dtype", "auto", "--tensor-parallel-size", "2",
                "--gpu-memory-utilization", "0.8", "--kv-cache-memory-bytes", "10737418240",
            ],
            id="gpu-tensor-parallel-kv-cache",
        ),
        pytest.param(
            {
                "resources": {"accelerator": {"gpu": {"countPerReplica": 1}}},
                "serving": {"multimodal": {"maxImagesPerPrompt": 4, "maxAudioClipsPerPrompt": 1}},
            },
            [
                "--dtype", "auto", "--tensor-parallel-size", "1",
                "--gpu-memory-utilization", "0.9",
                "--limit-mm-per-prompt", '{"image":4,"audio":1}',
            ],
            id="multimodal-limits",
        ),
        pytest.param(
            {
                "engine": {
                    "extraArgs": ["--enable-auto-tool-choice"], "toolCallParser": "llama3_json"
                },
            },
            [
                "--dtype", "auto", "--tensor-parallel-size", "1", "--max-num-seqs", "2",
                "--tool-call-parser", "llama3_json", "--enable-auto-tool-choice",
            ],
            id="auto-tool-choice-given-once",
        ),
    ],
)  # fmt: skip
def test_local_command_runs_vllm_serve_with_the_manifest_engine_args(model, expected_args):
    argv = local_command(manifest(**model), 8000)
    assert argv == [*VLLM_HEAD, "--served-model-name", "chat", *expected_args]


def test_local_command_fills_a_template_token_by_token_without_a_shell():
    template = "python -m my.server --model={model} --listen '127.0.0.1:{port}' {args} --id {name}"
    argv = local_command(
        manifest(engine={"extraArgs": ["--response-role", "a b 'q'"]}), 9000, template
    )
    assert argv[:4] == ["python", "-m", "my.server", "--model=Qwen/Qwen3-0.6B"]
    assert argv[4:6] == ["--listen", "127.0.0.1:9000"]
    assert argv[-4:] == ["--response-role", "a b 'q'", "--id", "chat"]


def test_default_template_is_vllm_serve():
    assert DEFAULT_TEMPLATE.startswith("vllm serve {model} --host 127.0.0.1 --port {port}")


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ("vllm serve '{model}", "cannot be split"),
        ("   ", "is empty"),
        ("vllm serve {model}", "has no {port}"),
        ("vllm serve {mdoel} --port {port}", "unknown placeholder {mdoel}"),
    ],
)
def test_a_bad_template_is_refused_naming_the_setting(template, complaint, tmp_path):
    with pytest.raises(TemplateError) as error:
        local_command(manifest(), 8000, template)
    assert "SERVEDECK_LOCAL_COMMAND" in str(error.value)
    assert complaint in str(error.value)
    with pytest.raises(TemplateError):
        LocalRunner(tmp_path, template=template)


def test_the_template_comes_from_settings_then_the_environment(monkeypatch, settings):
    settings.SERVEDECK_LOCAL_COMMAND = ""  # the suite's stand-in, set for every test, off here
    monkeypatch.delenv("SERVEDECK_LOCAL_COMMAND", raising=False)
    assert configured_template() == DEFAULT_TEMPLATE
    monkeypatch.setenv("SERVEDECK_LOCAL_COMMAND", "fake --port {port}")
    assert configured_template() == "fake --port {port}"
    settings.SERVEDECK_LOCAL_COMMAND = "from-settings --port {port}"
    assert configured_template() == "from-settings --port {port}"


def test_local_env_sizes_the_cpu_kv_cache_in_whole_gib():
    assert local_env(manifest())["VLLM_CPU_KVCACHE_SPACE"] == "1"  # a quarter of 4Gi
    assert local_env(manifest(serving={"kvCacheSize": "1536Mi"}))["VLLM_CPU_KVCACHE_SPACE"] == "2"
    gpu = manifest(resources={"accelerator": {"gpu": {"countPerReplica": 1}}})
    assert "VLLM_CPU_KVCACHE_SPACE" not in local_env(gpu)


def test_servers_see_their_tools_settings_but_never_the_consoles_secrets():
    console = {
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf_abc",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "LC_ALL": "C.UTF-8",
        "SECRET_KEY": "x" * 50,
        "DATABASE_URL": "postgres://u:p@db/servedeck",
        "REDIS_URL": "redis://cache",
    }
    env = server_environment(console, {"CUDA_VISIBLE_DEVICES": ""})
    assert env == {
        "PATH": "/usr/bin",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "",
        # The host's token is never passed (tests/jobs/test_token_variables.py), nor read
        # from a file saved on the host.
        "HF_TOKEN_PATH": os.devnull,
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    }


# --- prerequisites -----------------------------------------------------------------------------


@pytest.fixture
def empty_path(tmp_path, monkeypatch) -> Path:
    """PATH (and the console's own bin directory) point at an empty directory."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    return empty


def said(problems) -> list[str]:
    """The words of the machine's refusals."""
    return [p.message for p in problems]


def fake_nvidia_smi(folder: Path, gpus: int) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    lines = "".join(f"echo 'GPU {i}: NVIDIA L4 (UUID: GPU-{i:08d})'\n" for i in range(gpus))
    script.write_text(f"#!/bin/sh\n{lines}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_missing_vllm_is_refused_in_plain_words_without_the_hosts_path(empty_path):
    # Without vLLM an hf:// model goes to a CPU runtime, which uses no GPU: asked for one,
    # it is refused, saying vLLM is missing; the host's PATH is not told.
    gpu = manifest(
        uri="hf://Qwen/Qwen2.5-7B-Instruct",
        resources={"accelerator": {"gpu": {"countPerReplica": 1}}},
    )
    refusals = said(check(gpu))
    assert len(refusals) == 1, refusals
    assert "vLLM is not installed on this machine" in refusals[0]
    assert "Install vLLM, remove resources.accelerator to run on the CPU" in refusals[0]
    assert str(empty_path) not in refusals[0]  # callers see no detail of the console's host
    assert VLLM_MISSING == (
        "vLLM is not installed on this machine; install it or use a Kubernetes profile"
    )


def test_every_refusal_is_given_at_once(empty_path):
    gpu = manifest(resources={"accelerator": {"gpu": {"countPerReplica": 1}}})
    refusals = said(check(gpu, "no-such-server --port {port}"))
    assert len(refusals) == 2
    assert refusals[0].startswith("The local model server command 'no-such-server'")
    assert "nvidia-smi is not on the console host's PATH" in refusals[1]


def test_a_missing_stand_in_command_names_the_setting(empty_path):
    refusals = said(check(manifest(), "no-such-server --port {port}"))
    assert refusals == [
        "The local model server command 'no-such-server' (SERVEDECK_LOCAL_COMMAND) is not "
        "installed (not on the console host's PATH); install it or correct "
        "SERVEDECK_LOCAL_COMMAND."
    ]


def test_a_gpu_without_nvidia_smi_is_refused(empty_path, tag):
    gpu = manifest(resources={"accelerator": {"gpu": {"countPerReplica": 1}}})
    refusals = said(check(gpu, stand_in(tag)))
    assert len(refusals) == 1
    assert "asks for 1 NVIDIA GPU(s) per replica" in refusals[0]
    assert "nvidia-smi is not on the console host's PATH" in refusals[0]
    assert "Remove resources.accelerator to run on the CPU" in refusals[0]


def test_more_gpus_than_the_machine_has_are_refused(tmp_path, monkeypatch, tag):
    fake_nvidia_smi(tmp_path / "bin", gpus=1)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    two = manifest(resources={"accelerator": {"gpu": {"countPerReplica": 2}}})
    assert said(check(two, stand_in(tag))) == [
        "spec.source.model.resources.accelerator.gpu.countPerReplica is 2 for 1 replica(s), 2 "
        "GPU(s) in all, and this machine has 1; lower countPerReplica or scaling.minReplicas, "
        "or use a Kubernetes profile with GPU nodes."
    ]


def test_predictive_formats_and_raw_inference_services_are_refused(tag):
    sklearn = parse(
        {
            "apiVersion": "servedeck.io/v1",
            "kind": "Application",
            "spec": {
                "name": "fraud",
                "profileName": "local",
                "source": {
                    "type": "Model",
                    "model": {"uri": "pvc://models-pvc/fraud/v3", "format": "SKLearn"},
                },
            },
        },
        CONTEXT,
    ).manifest
    refusals = said(check(sklearn, stand_in(tag)))
    assert (
        "spec.source.model.format is SKLearn: the local backend serves vLLM-format models only; "
        "use a Kubernetes profile (KServe) to serve SKLearn models." in refusals
    )
    downloads = (
        "serves hf:// models and s3://, gs:// and Azure Blob folders (the replica downloads them) "
        "and file://"
    )
    assert any(downloads in r for r in refusals)
    raw = {"spec": {"name": "raw", "source": {"type": "YAML", "inferenceService": {}}}}
    assert "cannot run a raw InferenceService" in said(check(raw, stand_in(tag)))[0]


def test_each_refusal_names_the_field_it_is_about_without_reading_its_words(
    tmp_path, monkeypatch, tag
):
    """The dry run routes the machine's answers by the field they name (never by a sentence's
    first words): a refusal about the machine itself names none."""
    fake_nvidia_smi(tmp_path / "bin", gpus=1)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    two = manifest()  # then what the manifest rules would refuse on a local profile already
    two["spec"]["source"]["model"]["resources"]["nodesPerReplica"] = 2
    two["spec"]["source"]["model"]["runtime"]["isolation"] = "VirtualMachine"
    answers = check(two, "no-such-server --port {port}")
    assert [(p.path, p.about, p.origin) for p in answers] == [
        ("spec.profileName", f"{MODEL}.runtime.isolation", "target"),
        ("spec.profileName", f"{MODEL}.resources.nodesPerReplica", "target"),
        ("spec.profileName", "", "target"),  # the command is this machine's, no field's
    ]
    (gpus,) = check(
        manifest(resources={"accelerator": {"gpu": {"countPerReplica": 2}}}), stand_in(tag)
    )
    assert gpus.about == f"{MODEL}.resources.accelerator.gpu.countPerReplica"
    huge = capacity_refusals(
        manifest(scaling={"minReplicas": HUGE}), Machine(cores=2, memory=2**30)
    )
    assert [p.about for p in huge] == [f"{MODEL}.scaling.minReplicas"]


def test_apply_refuses_without_starting_anything(runner, empty_path, tag):
    gpu = manifest(resources={"accelerator": {"gpu": {"countPerReplica": 1}}})
    with pytest.raises(LocalRefused) as refused:
        runner.apply("chat", gpu, 1)
    assert "nvidia-smi" in refused.value.refusals[0]
    assert runner.observe("chat").phase == PENDING
    assert runner.applications() == []


# --- lifecycle against the stand-in ------------------------------------------------------------


def test_start_ready_chat_restart_stop_start_delete(runner, tag):
    # Slow to answer, so the first look finds it Loading even when the machine is busy.
    slow = manifest(engine={"extraArgs": ["--startup-delay", "1.5"]})
    status = runner.apply("chat", slow, 1)
    assert status.phase == LOADING
    assert "0 of 1 replicas answer" in status.reason
    status = wait_for(runner, "chat", RUNNING)
    assert status.endpoint.startswith("http://127.0.0.1:")
    assert (status.ready_replicas, status.desired_replicas, status.revision) == (1, 1, 1)
    first_pid = status.replicas[0].pid
    assert running(first_pid)

    reply = client_for(status.endpoint).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "What is the capital of France?"}]
    )
    assert reply.choices[0].message.content.endswith("What is the capital of France?")
    assert reply.model == "chat"
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    log = "\n".join(runner.tail("chat", 50))
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK' in log
    assert "CUDA_VISIBLE_DEVICES=\n" in log + "\n"  # a CPU replica sees no GPU
    assert '"--max-num-seqs", "2"' in log  # the engine arguments reached the server

    runner.restart("chat")
    restarted = wait_for(runner, "chat", RUNNING)
    assert restarted.replicas[0].pid != first_pid
    assert not running(first_pid)
    assert restarted.endpoint == status.endpoint  # the port is reused while it is free

    stopped = runner.stop("chat")
    assert stopped.phase == STOPPED
    assert "Stopped on request" in stopped.reason
    assert stopped.next_step == "Start it to run it again."
    assert servers_tagged(tag) == []
    assert runner.observe("chat").phase == STOPPED

    runner.start("chat")
    started = wait_for(runner, "chat", RUNNING)
    assert running(started.replicas[0].pid)
    assert len(runner.tail("chat", 1000)) > 10  # the log of every run is kept

    runner.delete("chat")
    assert servers_tagged(tag) == []
    assert not (tag / "chat").exists()
    assert runner.observe("chat").phase == PENDING
    with pytest.raises(UnknownApplication):
        runner.restart("chat")


def test_a_crash_fails_with_its_exit_code_and_last_log_lines(runner):
    runner.apply("crashy", manifest("crashy", engine={"extraArgs": ["--crash-after", "0.3"]}), 1)
    wait_for(runner, "crashy", RUNNING)
    status = wait_for(runner, "crashy", FAILED)
    assert "exited with code 3" in status.reason
    assert "simulated crash: the engine core died unexpectedly" in status.reason
    assert "---- servedeck:" not in status.reason  # only the lines of this run
    assert len(status.reason.splitlines()) <= 21
    assert "deploy again" in status.next_step
    assert status.replicas[0].exit_code == 3


@pytest.mark.parametrize(
    "args, ended",
    [(["--fail-on-start"], "exited with code 1"), (["--crash-after", "0.3"], "exited with code 3")],
)
def test_another_process_of_this_console_learns_the_exit_code(runner, tag, args, ended):
    """The web process starts the servers; the reconciler, another process with its own
    runner on the same state folder, is the one that sees them exit: it knows the code."""
    runner.apply("crashy", manifest("crashy", engine={"extraArgs": args}), 1)
    reconciler = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0)
    status = wait_for(reconciler, "crashy", FAILED)
    assert ended in status.reason
    assert "unknown" not in status.reason
    assert runner.observe("crashy").reason == status.reason  # the starter agrees


def test_a_server_that_fails_on_start(runner):
    runner.apply("broken", manifest("broken", engine={"extraArgs": ["--fail-on-start"]}), 1)
    status = wait_for(runner, "broken", FAILED)
    assert "exited with code 1" in status.reason
    assert "simulated start failure: no weights found" in status.reason
    assert status.endpoint == ""


def test_the_failure_reason_takes_secrets_out_of_the_log_lines_it_quotes(tag, monkeypatch):
    """The reason of a Failed replica quotes its last log lines on every page (viewers' too,
    and the events): they are redacted as the log tail is, the operator's secrets and the
    application's Hugging Face token taken out."""
    operator = "operator-database-password-123"
    monkeypatch.setenv("SERVEDECK_TEST_DB_PASSWORD", operator)
    own = "hf_ApplicationsOwnToken0123456789abcd"
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0, probe_timeout=0.5)
    runner.token_for = lambda name: own
    try:
        runner.apply("broken", manifest("broken", engine={"extraArgs": ["--fail-on-start"]}), 1)
        wait_for(runner, "broken", FAILED)
        with open(tag / "broken" / "replica-0.log", "a") as log:
            log.write(f"connecting with {operator}\nAuthorization: Bearer {own}\n")
        reason = runner.observe("broken").reason
    finally:
        runner.shutdown()
    assert "connecting with [redacted]" in reason and "Bearer [redacted]" in reason
    assert operator not in reason and own not in reason


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(tag):
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=0.3, probe_timeout=0.5)
    try:
        runner.apply(
            "stubborn", manifest("stubborn", engine={"extraArgs": ["--ignore-sigterm"]}), 1
        )
        pid = wait_for(runner, "stubborn", RUNNING).replicas[0].pid
        began = time.monotonic()
        runner.stop("stubborn")
        assert time.monotonic() - began >= 0.3
        assert not running(pid)
    finally:
        runner.shutdown()
    assert servers_tagged(tag) == []


def test_stopping_a_server_also_stops_the_workers_it_left_in_its_group(runner):
    runner.apply("chat", manifest(engine={"extraArgs": ["--spawn-worker"]}), 1)
    wait_for(runner, "chat", RUNNING)
    line = next(line for line in runner.tail("chat", 20) if "worker pid" in line)
    worker = int(line.rsplit(" ", 1)[1])
    assert running(worker)
    runner.stop("chat")
    assert not running(worker)


def test_apply_keeps_servers_for_the_same_manifest_and_replaces_them_for_a_new_one(runner):
    runner.apply("chat", manifest(), 1)
    pid = wait_for(runner, "chat", RUNNING).replicas[0].pid
    assert runner.apply("chat", manifest(), 2).replicas[0].pid == pid
    assert runner.observe("chat").revision == 2
    changed = runner.apply("chat", manifest(serving={"maxContextTokens": 2048}), 3)
    assert changed.replicas[0].pid != pid
    assert not running(pid)
    assert wait_for(runner, "chat", RUNNING).revision == 3
    assert '"--max-model-len", "2048"' in "\n".join(runner.tail("chat", 20))


def test_min_replicas_start_that_many_servers_on_their_own_ports(runner, tag):
    runner.apply("pair", manifest("pair", scaling={"minReplicas": 2}), 1)
    status = wait_for(runner, "pair", RUNNING)
    assert status.ready_replicas == 2
    assert len({r.port for r in status.replicas}) == 2
    assert len(servers_tagged(tag)) == 2
    assert runner.tail("pair", 5, replica=1)


def test_a_console_started_again_finds_its_servers(runner, tag):
    runner.apply("chat", manifest(), 1)
    pid = wait_for(runner, "chat", RUNNING).replicas[0].pid
    later = LocalRunner(tag, template=stand_in(tag), grace_seconds=2.0)
    status = later.observe("chat")
    assert status.phase == RUNNING
    assert status.replicas[0].pid == pid
    later.stop("chat")
    assert not running(pid)
    assert servers_tagged(tag) == []


def test_a_pid_that_runs_something_else_counts_as_exited_and_is_never_killed(runner, tag):
    mine = os.getpid()
    ticks = proc.proc_stat(mine).start_ticks
    state = AppState(
        name="ghost",
        revision=4,
        manifest=manifest("ghost"),
        template=runner.template,
        replicas=[
            Replica(0, 45678, mine, ticks, "2025-01-01T00:00:00+00:00", ["vllm", "serve", "x"],
                    boot_id=proc.boot_id())
        ],
    )  # fmt: skip
    runner._save(state)
    status = runner.observe("ghost")
    assert status.phase == FAILED
    assert "exit code is unknown" in status.reason
    runner.delete("ghost")
    assert running(mine)


def test_shutdown_stops_everything_and_resume_starts_it_again(runner, tag):
    runner.apply("chat", manifest(), 1)
    wait_for(runner, "chat", RUNNING)
    runner.shutdown()
    assert servers_tagged(tag) == []
    status = runner.observe("chat")
    assert status.phase == STOPPED
    assert "shut down" in status.reason
    assert runner.resume() == ["chat"]
    wait_for(runner, "chat", RUNNING)


def test_gpu_replicas_get_their_own_devices_and_a_busy_machine_refuses(
    runner, tmp_path, monkeypatch
):
    fake_nvidia_smi(tmp_path / "bin", gpus=2)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    gpu = {"resources": {"accelerator": {"gpu": {"countPerReplica": 1}}}}
    runner.apply("pair", manifest("pair", scaling={"minReplicas": 2}, **gpu), 1)
    wait_for(runner, "pair", RUNNING)
    assert any("CUDA_VISIBLE_DEVICES=0" in line for line in runner.tail("pair", 10, replica=0))
    assert any("CUDA_VISIBLE_DEVICES=1" in line for line in runner.tail("pair", 10, replica=1))
    with pytest.raises(LocalRefused) as refused:
        runner.apply("third", manifest("third", **gpu), 1)
    assert "needs 1 GPU(s) and 0 of this machine's 2 are free" in refused.value.refusals[0]


def test_logs_are_capped_and_tail_reads_across_the_rotation(tag):
    runner = LocalRunner(tag, template=stand_in(tag), max_log_bytes=4096, probe_timeout=0.5)
    try:
        runner.apply("chat", manifest(), 1)
        endpoint = wait_for(runner, "chat", RUNNING).endpoint
        with httpx.Client(trust_env=False) as client:
            for _ in range(60):
                client.get(f"{endpoint}/v1/models")
        runner.observe("chat")
        log = tag / "chat" / "replica-0.log"
        assert log.stat().st_size <= 2048
        assert (tag / "chat" / "replica-0.log.1").stat().st_size > 2048
        with httpx.Client(trust_env=False) as client:
            client.get(f"{endpoint}/health")
        assert '"GET /health HTTP/1.1" 200 OK' in runner.tail("chat", 5)[-1]
        assert len(runner.tail("chat", 40)) == 40
    finally:
        runner.shutdown()
    assert servers_tagged(tag) == []


def test_names_that_are_not_dns_labels_never_become_paths(runner):
    for name in ("../etc", "Chat", "a/b", ""):
        with pytest.raises(ValueError):
            runner.observe(name)
    with pytest.raises(ValueError, match="spec.name"):
        runner.apply("other", manifest("chat"), 1)


# --- pure helpers ------------------------------------------------------------------------------


def test_failed_status_names_the_signal_and_suggests_memory():
    state = AppState(
        name="chat",
        revision=2,
        manifest=manifest(),
        template=DEFAULT_TEMPLATE,
        replicas=[
            Replica(0, 8000, 123, 1, "2025-01-01T00:00:00+00:00", ["vllm"], exit_code=-9,
                    exited_at="2025-01-01T00:00:30+00:00")
        ],
    )  # fmt: skip
    status = derive_status(state, {}, ["Loading weights took 20 s"])
    assert status.phase == FAILED
    assert status.reason == (
        "Replica 0 (pid 123) was killed by SIGKILL within 30 s of starting. Its last log lines:\n"
        "Loading weights took 20 s"
    )
    assert "runs out of memory" in status.next_step
    oom = derive_status(state, {}, ["torch.OutOfMemoryError: CUDA out of memory."])
    assert oom.next_step.startswith("It ran out of memory")


@pytest.mark.parametrize(
    ("cmdline", "command", "same"),
    [
        (["/v/bin/python3", "/v/bin/vllm", "serve", "m"], ["/v/bin/vllm", "serve", "m"], True),
        (["/usr/bin/python3", "s.py", "-p", "1"], ["/usr/bin/python3", "s.py", "-p", "1"], True),
        (["/v/bin/python3", "/v/bin/vllm", "serve", "other"], ["/v/bin/vllm", "serve", "m"], False),
        (["/bin/bash"], ["/v/bin/vllm", "serve", "m"], False),
        (None, ["vllm"], False),
    ],
)  # fmt: skip
def test_cmdline_matches(cmdline, command, same):
    assert proc.cmdline_matches(cmdline, command) is same


def test_parse_stat_reads_past_a_command_name_with_spaces_and_parens():
    fields = " ".join(str(n) for n in range(4, 53))
    stat_ = proc.parse_stat(f"42 (odd ) name) S 1 42 42 {fields}")
    assert (stat_.state, stat_.ppid, stat_.pgrp) == ("S", 1, 42)
    assert stat_.start_ticks == 19  # field 22 of the file


EXITING = proc.ProcStat(state="R", pgrp=42, ppid=1, start_ticks=7)


@pytest.mark.parametrize(
    "stat, cmdline, start_ticks, on_its_way_out",
    [
        (EXITING, None, 7, True),  # memory released, not a zombie yet: look again later
        (EXITING, ["vllm", "serve"], 7, False),  # still runs a command
        (EXITING, None, 8, False),  # another process has the pid now
        (EXITING, None, None, False),  # no start time recorded: cannot tell it is ours
        (proc.ProcStat(state="Z", pgrp=42, ppid=1, start_ticks=7, wait_status=256), None, 7, False),
        (None, None, 7, False),  # gone (reaped)
    ],
)  # fmt: skip
def test_a_process_on_its_way_out_is_not_taken_for_ended(
    stat, cmdline, start_ticks, on_its_way_out
):
    """Another console process reading /proc between an exit's start and the zombie would
    record the replica as ended with its exit code unknown, for good (seen as a flaky page
    test under load)."""
    assert proc.on_its_way_out(stat, cmdline, start_ticks) is on_its_way_out


def test_parse_gpu_list():
    text = "GPU 0: NVIDIA L4 (UUID: GPU-a)\nGPU 1: NVIDIA L4 (UUID: GPU-b)\n"
    assert parse_gpu_list(text) == [0, 1]
    assert parse_gpu_list("No devices were found\n") == []


def test_tail_shows_what_a_terminal_would_for_progress_bars(tmp_path):
    log = tmp_path / "replica-0.log"
    log.write_bytes(b"one\nDownloading 10%\rDownloading 100%\nthree\n")
    assert proc.tail_lines(log, 2) == ["Downloading 100%", "three"]
    assert proc.tail_lines(log, 0) == []


# --- the stand-in speaks the OpenAI wire format ------------------------------------------------


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    """One stand-in server for the wire-format tests."""
    tag = tmp_path_factory.mktemp("wire") / "local"
    runner = LocalRunner(tag, template=stand_in(tag, startup_delay=0), probe_timeout=0.5)
    runner.apply("wire", manifest("wire"), 1)
    endpoint = wait_for(runner, "wire", RUNNING).endpoint
    yield endpoint
    runner.shutdown()
    assert servers_tagged(tag) == []


def test_stand_in_streams_chat_chunks_ending_in_done(wire):
    stream = client_for(wire).chat.completions.create(
        model="wire",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from wire. You said: stream please"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 7
    with httpx.stream(
        "POST",
        f"{wire}/v1/chat/completions",
        json={"model": "wire", "messages": [{"role": "user", "content": "x"}], "stream": True},
        trust_env=False,
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"


def test_stand_in_completions_embeddings_and_errors(wire):
    client = client_for(wire)
    completion = client.completions.create(model="wire", prompt="Say hi", max_tokens=3)
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "Hello from wire."
    assert completion.choices[0].finish_reason == "length"
    vectors = client.embeddings.create(model="wire", input=["eating bread", "eating bread", "x"])
    first, second, third = (d.embedding for d in vectors.data)
    assert first == second != third
    assert len(first) == 16
    raw = httpx.post(
        f"{wire}/v1/embeddings",
        json={"model": "wire", "input": "eating bread", "encoding_format": "base64"},
        trust_env=False,
    ).json()["data"][0]["embedding"]
    assert list(struct.unpack("<16f", base64.b64decode(raw))) == pytest.approx(first, abs=1e-6)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="wire", messages=[])


def test_stand_in_requires_its_api_key_when_given_one(tag):
    # --api-key is never an engine argument (the platform decides who may call); an
    # operator's command template may still give one.
    runner = LocalRunner(
        tag, template=stand_in(tag) + " --api-key k3y", grace_seconds=1.0, probe_timeout=0.5
    )
    try:
        _locked_server_refuses_calls_without_its_key(runner)
    finally:
        runner.shutdown()


def _locked_server_refuses_calls_without_its_key(runner):
    runner.apply("locked", manifest("locked"), 1)
    port = runner.observe("locked").replicas[0].port
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(trust_env=False) as client:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                client.get(f"{base}/health")
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert client.get(f"{base}/v1/models").status_code == 401
    # Readiness asks /v1/models without a key: such a server never counts as ready.
    assert runner.observe("locked").phase == LOADING
    key = openai.OpenAI(base_url=f"{base}/v1", api_key="k3y", max_retries=0)
    assert key.models.list().data[0].id == "locked"
    with pytest.raises(openai.AuthenticationError):
        client_for(base).models.list()


def test_stand_in_health_and_metrics(wire):
    with httpx.Client(trust_env=False) as client:
        assert client.get(f"{wire}/health").status_code == 200
        metrics = client.get(f"{wire}/metrics").text
        models = client.get(f"{wire}/v1/models").json()
    assert 'vllm:num_requests_waiting{model_name="wire"} 0.0' in metrics
    assert "# TYPE vllm:num_requests_waiting gauge" in metrics
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "wire"


@pytest.fixture
def open_umask():
    """The umask of a user who lets everyone read (the console's settings set 077)."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_state_logs_and_locks_are_private_whatever_the_umask(open_umask, tmp_path):
    tag = tmp_path / "fresh" / "state"  # neither folder exists yet
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0, probe_timeout=0.5)
    try:
        runner.apply("chat", manifest(), 1)
        wait_for(runner, "chat", RUNNING)
    finally:
        runner.shutdown()
    made = [p for p in [tmp_path / "fresh", *sorted((tmp_path / "fresh").rglob("*"))]]
    assert {p.relative_to(tmp_path).as_posix() for p in made} >= {
        "fresh/state/chat/state.json",
        "fresh/state/chat/replica-0.log",
        "fresh/state/.locks/chat.lock",
    }
    wrong = {
        p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
        for p in made
        if p.stat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)
    }
    assert wrong == {}
    assert servers_tagged(tag) == []


# --- capacity: never more model servers than this machine holds ---------------------------------

HUGE = 2147483647


@pytest.mark.parametrize(
    ("model", "holds"),
    [
        ({"scaling": {"minReplicas": 3}}, 2),
        ({"scaling": {"minReplicas": 2}, "resources": {"cpu": "1", "memory": "5Gi"}}, 1),
        ({"scaling": {"minReplicas": 2}, "resources": {"cpu": "4", "memory": "1Gi"}}, 1),
        ({"scaling": {"minReplicas": HUGE}}, 2),
        # On a GPU a replica counts one core, whatever its Kubernetes CPU request (6).
        (
            {
                "scaling": {"minReplicas": 3},
                "resources": {"accelerator": {"gpu": {"countPerReplica": 1}}, "memory": "1Gi"},
            },
            2,
        ),
    ],
)
def test_replicas_are_capped_by_the_machines_cores_and_memory(model, holds):
    here = Machine(cores=2, memory=8 * 2**30)
    (refusal,) = said(capacity_refusals(manifest(**model), here))
    assert refusal.startswith("spec.source.model.scaling.minReplicas is ")
    assert "2 core(s) and 8.0 GiB of memory" in refusal
    assert f"it holds {holds}. Set scaling.minReplicas to {holds} or less" in refusal
    assert len(refusal) < 600


def test_replicas_that_fit_are_not_refused():
    here = Machine(cores=2, memory=8 * 2**30)
    assert capacity_refusals(manifest(scaling={"minReplicas": 2}), here) == []
    half = {"cpu": "500m", "memory": "2Gi"}
    assert capacity_refusals(manifest(scaling={"minReplicas": 4}, resources=half), here) == []
    # One replica is never refused here, however large.
    big = {"cpu": "64", "memory": "1Ti"}
    assert capacity_refusals(manifest(resources=big), here) == []


def test_this_machine_is_discovered():
    found = machine()
    assert found.cores == len(os.sched_getaffinity(0))
    assert found.memory > 0


def test_a_huge_min_replicas_is_refused_before_anything_starts(runner, tag):
    refusals = said(runner.check(manifest(scaling={"minReplicas": HUGE})))
    assert any(f"{machine().cores} core(s)" in r for r in refusals), refusals
    with pytest.raises(LocalRefused):
        runner.apply("chat", manifest(scaling={"minReplicas": HUGE}), 1)
    assert servers_tagged(tag) == []
    assert runner.applications() == []


def test_a_stored_state_that_no_longer_fits_starts_nothing(runner, tag):
    runner.apply("chat", manifest(), 1)
    pid = wait_for(runner, "chat", RUNNING).replicas[0].pid
    state_file = tag / "chat" / "state.json"
    state = json.loads(state_file.read_text())
    state["manifest"]["spec"]["source"]["model"]["scaling"]["minReplicas"] = HUGE
    state_file.write_text(json.dumps(state))  # written before the rule, or by hand
    for verb in (runner.restart, runner.start):
        with pytest.raises(LocalRefused, match="minReplicas is 2.15e"):
            verb("chat")
    assert running(pid)  # the running server was left alone
    assert servers_tagged(tag) == [pid]
