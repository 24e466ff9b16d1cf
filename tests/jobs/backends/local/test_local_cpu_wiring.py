"""The real local backend (no SERVEDECK_LOCAL_COMMAND) on a machine without vLLM: it picks the
CPU runtime for a model folder, starts it from the runtime's virtualenv bound to loopback
with telemetry off and a Hugging Face home of its own, probes the runtime's readiness path,
and stops and restarts it like any replica; a missing virtualenv or a folder outside the
models folder is refused with the fix.

The runtime here is a small stand-in installed where scripts/cpu_runtimes.sh would put
transformers serve (a program in <runtimes>/transformers/bin with the install stamp,
tests/fakes/cpu_runtime.py): it answers only /health, as transformers serve does before
/v1/models, and prints what it was given. test_cpu_runtimes_real.py beside this file runs
the real runtimes.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from jobs.backends.local import runtimes as rt
from jobs.backends.local import vllm_cpu as vc
from jobs.backends.local.command import DEFAULT_TEMPLATE
from jobs.backends.local.runner import LocalRefused, LocalRunner
from jobs.machine_catalog import MachineReadings, machine_catalog
from models_catalog.check import check_model
from tests.fakes.cpu_runtime import install_fake
from tests.helpers import TINY_LLAMA_CONFIG, wait_for


def safetensors(path: Path, tensors: dict[str, list[int]], dtype: str = "F32") -> None:
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
              for name, shape in tensors.items()}  # fmt: skip
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def chat_folder(models: Path, name: str = "SmolLM2-135M-Instruct") -> Path:
    folder = models / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    safetensors(folder / "model.safetensors", {"embed": [10, 4], "head": [4, 10]})
    return folder


def manifest(name: str, uri: str) -> dict:
    model = {
        "uri": uri,
        "format": "vLLM",
        "runtime": {"engine": "vllm"},
        "resources": {"cpu": "1", "memory": "1Gi"},
        "scaling": {"minReplicas": 1},
    }
    return {"spec": {"name": name, "source": {"type": "Model", "model": model}}}


def seen(runner: LocalRunner, name: str) -> dict:
    def found():
        lines = [line for line in runner.tail(name, 50) if line.startswith("SEEN ")]
        return json.loads(lines[-1][5:]) if lines else None

    return wait_for(found, f"{name}'s runtime printed nothing", 10)


def running(runner: LocalRunner, name: str):
    def phase():
        status = runner.observe(name)
        return status if status.phase == "Running" else None

    return wait_for(phase, f"{name} is {runner.observe(name)}", 20)


def test_a_model_folder_runs_on_the_chosen_cpu_runtime_like_any_replica(cpu_machine, tmp_path):
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = chat_folder(models)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    assert runner.template == DEFAULT_TEMPLATE
    chat = manifest("chat", f"file://{folder}")
    assert runner.check(chat) == []
    try:
        runner.apply("chat", chat, 1)
        status = running(runner, "chat")  # the stand-in answers /health only, not /v1/models
        assert status.runtime == "transformers"  # recorded, for the gateway's dialect
        given = seen(runner, "chat")
        argv = given["argv"]
        assert argv[:2] == ["serve", "--host"] and argv[2] == "127.0.0.1"
        assert argv[argv.index("--port") + 1] == str(status.replicas[0].port)
        # Served as the application's name: a link of that name, from its state folder.
        assert argv[-1] == "chat"
        link = Path(given["cwd"]) / "chat"
        assert link.resolve() == folder.resolve()
        assert Path(given["cwd"]).is_relative_to(tmp_path / "state" / "acme" / "chat")
        env = given["env"]
        assert env["HF_HUB_OFFLINE"] == "1" and env["DO_NOT_TRACK"] == "1"
        assert env["HF_HUB_DISABLE_TELEMETRY"] == "1"
        assert env["HF_HOME"] == str(tmp_path / "state" / "acme" / "chat" / "hf-home")
        assert "SECRET_KEY" not in env and env["CUDA_VISIBLE_DEVICES"] == ""
        state = json.loads((tmp_path / "state" / "acme" / "chat" / "state.json").read_text())
        assert (state["runtime"], state["model_id"]) == ("transformers", "chat")
        assert state["model"] == str(folder.resolve())

        first = status.replicas[0].pid
        restarted = runner.restart("chat")
        assert restarted.replicas[0].pid != first
        assert running(runner, "chat").replicas[0].port == status.replicas[0].port

        stopped = runner.stop("chat")
        assert stopped.phase == "Stopped"
        assert not os.path.exists(f"/proc/{restarted.replicas[0].pid}/stat") or (
            Path(f"/proc/{restarted.replicas[0].pid}/stat").read_text().split(") ")[1][0] == "Z"
        )
    finally:
        runner.shutdown()


def test_chat_runs_on_vllms_cpu_build_where_installed_and_answers_before_running(
    cpu_machine, tmp_path, settings, monkeypatch
):
    """With vLLM's CPU build installed (and a CPU it runs on) a chat folder runs on it: its
    API server module from its virtualenv, the manifest's KV cache and compile cache in its
    environment; the replica reads Running once it answered a one-token completion."""
    runtimes, models = cpu_machine
    monkeypatch.setattr(vc, "cpu_unfit", lambda machine, flags: None)
    settings.SERVEDECK_VLLM_CACHE_DIR = str(tmp_path / "vllm-cache")
    install_fake(runtimes)
    install_fake(runtimes, "vllm-cpu", version="0.32.0")
    folder = chat_folder(models)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    try:
        runner.apply("chat", manifest("chat", f"file://{folder}"), 1)
        status = running(runner, "chat")
        assert status.runtime == "vllm-cpu"
        # Why, as Check model said it: the model's page shows it beside the runtime.
        assert runner.chosen_because("chat").startswith("vLLM's CPU build (vLLM 0.32.0) serves")
        assert "POST /v1/completions" in runner.tail("chat", 50)
        given = seen(runner, "chat")
        argv = given["argv"]
        assert argv[:2] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert argv[argv.index("--model") + 1] == str(folder.resolve())
        assert argv[argv.index("--served-model-name") + 1] == "chat"
        env = given["env"]
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # a quarter of 1Gi, at least 1
        assert env["OMP_NUM_THREADS"] == "1"  # cpu: "1"
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert Path(env["VLLM_CACHE_ROOT"]).parent == tmp_path / "vllm-cache" / "0.32.0"
        assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    finally:
        runner.shutdown()


def test_a_missing_runtime_is_refused_with_the_command_that_installs_it(cpu_machine, tmp_path):
    runtimes, models = cpu_machine
    folder = chat_folder(models)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("chat", f"file://{folder}"))]
    assert len(refusals) == 1, refusals
    command = rt.install_command("transformers", runtimes)
    assert refusals[0].endswith(f"Install it with: {command}")
    assert "vLLM is not installed" not in refusals[0]  # the CPU runtime is what is missing
    with pytest.raises(LocalRefused):
        runner.apply("chat", manifest("chat", f"file://{folder}"), 1)


def test_only_folders_inside_the_models_folder_are_served(cpu_machine, tmp_path):
    runtimes, models = cpu_machine
    install_fake(runtimes)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    chat_folder(outside, "secret-model")
    (models / "sneaky").symlink_to(outside / "secret-model")
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)

    def refusal(uri: str) -> str:
        found = [p.message for p in runner.check(manifest("chat", uri))]
        assert len(found) == 1, found
        return found[0]

    out = refusal(f"file://{outside}/secret-model")
    assert "is outside the models folder" in out and "SERVEDECK_MODELS_DIR" in out
    (outside / "link").symlink_to(outside / "secret-model")
    elsewhere = refusal(f"file://{outside}/link")  # where a link out there leads is not told
    assert "is outside the models folder" in elsewhere and "leads to" not in elsewhere
    linked = refusal(f"file://{models}/sneaky")
    assert "is outside the models folder" in linked and "it leads to" in linked
    missing = refusal(f"file://{models}/nothing-here")
    assert "is not a folder on this machine" in missing


def test_an_hf_model_without_vllm_is_read_from_the_hub_and_refused_when_missing(
    cpu_machine, tmp_path
):
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("chat", "hf://HuggingFaceTB/x"))]
    assert len(refusals) == 1
    assert refusals[0].startswith("spec.source.model.uri: hf://HuggingFaceTB/x cannot be read")
    assert "was not found" in refusals[0]


def test_check_model_reads_a_folder_and_names_the_runtime_it_gets_here(cpu_machine):
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = models / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    safetensors(folder / "model.safetensors", {"embed": [100, 64], "layers": [2, 64, 64]})
    catalog = machine_catalog(MachineReadings(cores=2, memory_bytes=8 * 2**30, gpus=()))
    result = check_model(f"file://{folder}", catalog=catalog)
    assert result.can_serve, (result.verdict, result.next_step)
    assert (result.task, result.architecture) == ("generate", "LlamaForCausalLM")
    assert result.parameters == 100 * 64 + 2 * 64 * 64  # from the safetensors header
    assert result.weight_source == "headers" and result.max_context_tokens == 2048
    assert result.runtime == "transformers"
    assert any(
        w.startswith("On this machine it runs on transformers: transformers serve serves chat")
        for w in result.warnings
    ), result.warnings

    outside = check_model(f"file://{models.parent}", catalog=catalog)
    assert not outside.can_serve and "is outside the models folder" in outside.verdict


@pytest.mark.parametrize("dtype", [None, "auto", "float32", "bfloat16"])
def test_check_model_sizes_the_memory_vllm_holds_the_weights_in_here(cpu_machine, org, dtype):
    """vLLM's CPU build serves engine.dtype auto in float32 where the CPU has no bfloat16
    instructions: a bfloat16 checkpoint then takes twice its size in memory. Check model sizes
    the replica for that, and the dry run fills resources.memory from it."""
    from jobs import deploy as verbs
    from jobs.manifest import cpu_memory, format_bytes
    from jobs.manifest.model_defaults import cpu_replica_bytes
    from tests.manifest_text import local_manifest

    runtimes, models = cpu_machine
    install_fake(runtimes, "vllm-cpu", version="0.32.0")
    folder = models / "llama-1b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG | {"torch_dtype": "bfloat16"}))
    safetensors(folder / "model.safetensors", {"embed": [1_200_000, 1000]}, dtype="BF16")
    catalog = machine_catalog(MachineReadings(cores=2, memory_bytes=64 * 2**30, gpus=()))

    result = check_model(f"file://{folder}", catalog=catalog, dtype=dtype)
    assert result.runtime == "vllm-cpu", result.verdict
    assert result.weight_bytes == 2_400_000_000  # as stored, whatever serves it
    in_float32 = vc.served_dtype(dtype, vc.cpu_flags()) == "float32"  # this machine's CPU
    held = 4_800_000_000 if in_float32 else 2_400_000_000
    assert result.cpu_weight_bytes == (held if in_float32 else None)
    assert result.cpu_memory_bytes == cpu_replica_bytes(held, result.kv_bytes())
    assert result.cpu_memory_bytes == (8 if in_float32 else 5) * 2**30

    doc = local_manifest("llama", f"file://{folder}")
    if dtype is not None:
        doc = doc.replace("      uri:", f"      engine:\n        dtype: {dtype}\n      uri:")
    run = verbs.dry_run(doc, org)
    assert run.ok, [str(p) for p in run.refusals]
    assert run.check.cpu_weight_bytes == result.cpu_weight_bytes
    memory = run.manifest["spec"]["source"]["model"]["resources"]["memory"]
    assert memory == format_bytes(cpu_memory(held)) == ("8Gi" if in_float32 else "5Gi")


def test_check_model_says_the_install_command_when_the_runtime_is_missing(cpu_machine):
    runtimes, models = cpu_machine
    folder = models / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    safetensors(folder / "model.safetensors", {"embed": [100, 64]})
    catalog = machine_catalog(MachineReadings(cores=2, memory_bytes=8 * 2**30, gpus=()))
    result = check_model(f"file://{folder}", catalog=catalog)
    assert not result.can_serve
    assert result.next_step == rt.install_command("transformers", runtimes)


def whisper_folder(models: Path, name: str) -> Path:
    folder = models / name
    folder.mkdir()
    for file in ("config.json", "model.bin", "vocabulary.txt"):
        (folder / file).write_text("{}")
    return folder


def test_a_runtime_ready_before_its_model_loads_is_running_after_one_request(cpu_machine, tmp_path):
    runtimes, models = cpu_machine
    install_fake(runtimes, "faster-whisper")
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    good = manifest("whisper", f"file://{whisper_folder(models, 'tiny-en')}")
    broken = manifest("broken", f"file://{whisper_folder(models, 'broken-en')}")
    try:
        runner.apply("whisper", good, 1)
        running(runner, "whisper")
        assert "POST /v1/audio/transcriptions" in runner.tail("whisper", 50)
        runner.apply("broken", broken, 1)

        def warmed_up() -> bool:
            runner.observe("broken")  # each observation probes, and sends the warm-up
            return "POST /v1/audio/transcriptions" in runner.tail("broken", 50)

        wait_for(warmed_up, "no warm-up request was sent", 20)
        status = runner.observe("broken")  # /health answers, the warm-up does not
        assert status.phase == "Loading", status
        assert "has not answered GET /health and a transcription" in status.reason
        assert "faster-whisper-server" in status.reason
    finally:
        runner.shutdown()


def test_a_chat_replica_is_running_only_once_it_answered_a_chat(cpu_machine, tmp_path):
    """transformers serve answers /health before it loads the model (the first chat after
    Running took 15 s): a replica reads Running only once a one-token chat was answered."""
    runtimes, models = cpu_machine
    install_fake(runtimes)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    good = manifest("chat", f"file://{chat_folder(models)}")
    broken = manifest("broken", f"file://{chat_folder(models, 'broken-chat')}")
    try:
        runner.apply("chat", good, 1)
        running(runner, "chat")
        assert "POST /v1/chat/completions" in runner.tail("chat", 50)
        runner.apply("broken", broken, 1)

        def chat_sent() -> bool:
            runner.observe("broken")  # each observation probes, and sends the chat
            return "POST /v1/chat/completions" in runner.tail("broken", 50)

        wait_for(chat_sent, "no chat was sent to the replica", 20)
        status = runner.observe("broken")  # /health answers, the chat does not
        assert status.phase == "Loading", status
    finally:
        runner.shutdown()


def test_a_folder_swapped_for_a_link_out_after_apply_is_not_started(cpu_machine, tmp_path):
    """The folder is checked where it is used, each time a server starts: a folder replaced by
    a link out of the models folder between apply and a later start is not served."""
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = chat_folder(models)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    chat_folder(outside, "private")
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    try:
        runner.apply("chat", manifest("chat", f"file://{folder}"), 1)
        running(runner, "chat")
        runner.stop("chat")
        seen_before = [line for line in runner.tail("chat", 200) if line.startswith("SEEN ")]
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()
        folder.symlink_to(outside / "private", target_is_directory=True)

        status = runner.start("chat")
        assert status.phase == "Failed", status
        assert status.replicas[0].pid is None  # never spawned
        log = runner.tail("chat", 200)
        assert [line for line in log if line.startswith("SEEN ")] == seen_before
        assert any("models folder" in line and "not started" in line for line in log), log
        assert str(outside) not in "\n".join(log)  # where the link leads is not logged
    finally:
        runner.shutdown()


def test_the_cpu_runtime_keeps_no_cache_nor_token_of_the_console(
    cpu_machine, tmp_path, monkeypatch
):
    """HF_HUB_CACHE or TRANSFORMERS_CACHE in the console's environment would point the
    runtime back at the console's own Hugging Face cache, past its HF_HOME; a runtime that
    reads a folder offline gets no Hugging Face token."""
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = chat_folder(models)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "console-cache"))
    monkeypatch.setenv("TRANSFORMERS_CACHE", str(tmp_path / "console-cache"))
    runner = LocalRunner(
        tmp_path / "state" / "acme", template=None, token_for=lambda name: "hf_profile_token"
    )
    try:
        runner.apply("chat", manifest("chat", f"file://{folder}"), 1)
        env = seen(runner, "chat")["env"]
        home = tmp_path / "state" / "acme" / "chat" / "hf-home"
        assert env["HF_HUB_CACHE"] == str(home / "hub")
        assert env["TRANSFORMERS_CACHE"] == str(home / "hub")
        assert "HF_TOKEN" not in env  # offline: the profile's token has nothing to open
    finally:
        runner.shutdown()


def test_check_model_reads_no_oversized_or_special_file_of_a_folder(cpu_machine):
    """A config.json far larger than any config, or one that is a FIFO or device, is not read
    (reading would hold the console's memory or block it); a malformed safetensors header is
    skipped, not a crash."""
    from models_catalog import folders

    _, models = cpu_machine
    folder = models / "odd"
    folder.mkdir()
    big = folder / "config.json"
    big.write_text('{"architectures": ["LlamaForCausalLM"]}' + " " * (folders.MAX_JSON_BYTES + 1))
    assert folders.read_json(big) is None
    big.unlink()
    os.mkfifo(big)
    assert folders.read_json(big) is None  # returns at once: a FIFO is not opened for reading
    bad = folder / "model.safetensors"
    raw = json.dumps({"w": {"dtype": "F32", "shape": ["x", 2]}, "v": [1]}).encode()
    bad.write_bytes(struct.pack("<Q", len(raw)) + raw)
    listed = folder / "list.safetensors"
    raw = json.dumps([1, 2]).encode()
    listed.write_bytes(struct.pack("<Q", len(raw)) + raw)
    assert folders.safetensors_parameters(folder) == {}


def test_a_file_of_a_folder_that_links_out_of_the_models_folder_is_refused(cpu_machine, tmp_path):
    """The folder resolves inside the models folder but one of its files is a link to the
    console's own files: the server would read them as the model's. Links within the models
    folder (a Hugging Face cache's snapshots point at its blobs) are fine."""
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = chat_folder(models)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    chat = manifest("chat", f"file://{folder}")
    blob = models / "blobs" / "tokenizer"
    blob.parent.mkdir()
    blob.write_text("{}")
    (folder / "tokenizer.json").symlink_to(blob)
    assert runner.check(chat) == []
    secret = tmp_path / "secret-key"
    secret.write_text("operator's")
    (folder / "tokenizer_config.json").symlink_to(secret)
    refusals = [p.message for p in runner.check(chat)]
    assert len(refusals) == 1, refusals
    assert "tokenizer_config.json" in refusals[0] and "outside the models folder" in refusals[0]
    assert str(secret) not in refusals[0]  # where it leads is not told
    with pytest.raises(LocalRefused):
        runner.apply("chat", chat, 1)


def test_a_file_uri_longer_than_a_path_can_be_is_refused_by_its_length(cpu_machine, tmp_path):
    """A path longer than the machine's PATH_MAX names nothing: refused before any lookup
    (following a long one part by part costs time growing with its square)."""
    _, models = cpu_machine
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("chat", f"file://{models}" + "/a" * 3000))]
    assert len(refusals) == 1, refusals
    assert "4096 characters" in refusals[0] and "spec.source.model.uri" in refusals[0]
    # Just under the limit: looked up, and refused as no folder (not an error of the OS).
    near = f"file://{models}/" + "/".join(["a" * 200] * ((4000 - len(str(models))) // 201))
    refusals = [p.message for p in runner.check(manifest("chat", near))]
    assert len(refusals) == 1 and "is not a folder on this machine" in refusals[0], refusals


def test_check_model_on_a_kubernetes_profile_does_not_read_the_consoles_disk(
    cpu_machine, org, tmp_path
):
    """The folder exists in the models folder, but the profile's cluster cannot read it: Check
    model says so and does not look at the console's disk for that member."""
    from jobs.dry_run import check_for_profile
    from jobs.models import Cluster, Profile

    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = chat_folder(models)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    cluster = Cluster.objects.create(
        organization=org, name="prod", backend="kubernetes", kubeconfig_path=str(kubeconfig),
        context="x", addons=["kserve"],
    )  # fmt: skip
    profile = Profile.objects.create(
        organization=org, name="prod", cluster=cluster, namespace="models"
    )
    result = check_for_profile(f"file://{folder}", profile)
    assert not result.can_serve
    assert "Kubernetes cluster cannot read" in result.verdict and "pvc://" in result.next_step
    assert result.architecture is None  # the folder's config.json was not read


def test_the_configured_server_is_given_the_resolved_folder_not_the_path_as_typed(
    cpu_machine, tmp_path
):
    """The folder is checked through its links; were the typed path passed on, a link in it
    could be pointed out of the models folder between the check and the server's read."""
    from tests.jobs.backends.local.test_local_backend import stand_in

    _, models = cpu_machine
    folder = chat_folder(models)
    (models / "current").symlink_to(folder, target_is_directory=True)
    template = stand_in(tmp_path / "state") + " --model-folder {model}"
    runner = LocalRunner(tmp_path / "state" / "acme", template=template)
    try:
        runner.apply("chat", manifest("chat", f"file://{models}/current"), 1)
        state = json.loads((tmp_path / "state" / "acme" / "chat" / "state.json").read_text())
        command = state["replicas"][0]["command"]
        given = command[command.index("--model-folder") + 1]
        assert given == str(folder.resolve())
        assert f"{models}/current" not in command
    finally:
        runner.shutdown()
