"""LoRA adapters on the local backend: served by vLLM only (its CPU build or on a GPU), from
folders under the models folder resolved where they are used, with the flags the platform sets.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from jobs.backends.local import serving_plan
from jobs.backends.local.command import local_command
from jobs.backends.local.replica_start import vllm_cpu_settings
from jobs.backends.local.state import AppState
from jobs.manifest.adapters import MAX_RANK
from tests.jobs.backends.local import test_local_runtime_choice as choice
from tests.jobs.backends.local.test_local_cpu_wiring import manifest
from tests.jobs.backends.local.test_local_runtime_choice import on_gpu

vllm_machine = choice.vllm_machine  # the fixture: vLLM and every CPU runtime installed

PATH = "spec.source.model.adapters"


def with_adapters(doc: dict, *adapters: tuple[str, str]) -> dict:
    doc["spec"]["source"]["model"]["adapters"] = [{"name": n, "uri": u} for n, u in adapters]
    return doc


def lora_folder(models: Path, name: str) -> Path:
    folder = models / name
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    return folder


def test_a_cpu_runtime_that_is_not_vllm_refuses_adapters_naming_it(vllm_machine):
    _, folder = vllm_machine
    adapter = lora_folder(folder.parent, "support-lora")
    refused = serving_plan.plan(
        with_adapters(manifest("chat", f"file://{folder}"), ("support", f"file://{adapter}"))
    )
    assert isinstance(refused, serving_plan.Refused), refused
    assert refused.field == PATH
    assert "serves the model on transformers, which cannot serve LoRA adapters" in refused.message


def test_vllm_gets_the_lora_flags_with_each_adapters_resolved_folder(vllm_machine):
    _, folder = vllm_machine
    adapter = lora_folder(folder.parent, "support-lora")
    link = folder.parent / "support-link"
    link.symlink_to(adapter, target_is_directory=True)
    doc = with_adapters(on_gpu(manifest("chat", f"file://{folder}")), ("support", f"file://{link}"))
    chosen = serving_plan.plan(doc)
    assert isinstance(chosen, serving_plan.Plan) and chosen.runtime == "vllm", chosen
    folders = serving_plan.adapter_folders(doc)
    assert folders == [("support", str(adapter))]  # the link resolved, as a model's folder
    argv = local_command(doc, 8001, model=str(folder), adapters=folders)
    at = argv.index("--enable-lora")
    assert argv[at : at + 7] == [
        "--enable-lora", "--max-lora-rank", str(MAX_RANK), "--max-loras", "1",
        "--lora-modules", f"support={adapter}",
    ]  # fmt: skip


def test_an_adapter_outside_the_models_folder_or_from_the_hub_is_refused_by_its_field(
    vllm_machine, tmp_path
):
    _, folder = vllm_machine
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    base = on_gpu(manifest("chat", f"file://{folder}"))
    refused = serving_plan.plan(with_adapters(base, ("a", f"file://{outside}")))
    assert isinstance(refused, serving_plan.Refused) and refused.field == f"{PATH}[0].uri"
    assert refused.message.startswith(f"{PATH}[0].uri file://") and "outside" in refused.message
    refused = serving_plan.plan(with_adapters(base, ("a", "hf://acme/smol-support-lora")))
    assert isinstance(refused, serving_plan.Refused) and refused.field == f"{PATH}[0].uri"
    assert "does not download hf:// or s3:// adapters yet" in refused.message


def test_vllms_cpu_build_is_given_the_flags_before_extra_args(settings, tmp_path):
    settings.SERVEDECK_VLLM_CACHE_DIR = str(tmp_path / "cache")
    model = {
        "uri": "file:///models/smol",
        "engine": {"extraArgs": ["--enforce-eager"]},
        "adapters": [{"name": "a", "uri": "file:///models/a"}],
    }
    doc = {"spec": {"name": "chat", "source": {"type": "Model", "model": model}}}
    state = AppState(name="chat", revision=1, manifest=doc, template="", runtime="vllm-cpu")
    engine, _ = vllm_cpu_settings(state, "/models/smol", Path("/srv/rt"), [("a", "/models/a")])
    assert engine[-3:] == ["--lora-modules", "a=/models/a", "--enforce-eager"]
    assert "--enable-lora" in engine


def test_a_revision_that_changes_only_adapters_reaches_the_running_replica(tmp_path, settings):
    """Loaded and unloaded at run time (the stand-in speaks vLLM's adapter routes): the same
    process answers to the new adapter; any other change restarts it."""
    from jobs.backends.local import processes as proc
    from jobs.backends.local.runner import LocalRunner
    from tests.jobs.backends.local.test_local_backend import (
        client_for,
        servers_tagged,
        stand_in,
        wait_for,
    )
    from tests.jobs.backends.local.test_local_backend import (
        manifest as filled,
    )

    models = tmp_path / "models"
    models.mkdir()
    settings.SERVEDECK_MODELS_DIR = str(models)
    first, second = lora_folder(models, "first"), lora_folder(models, "second")
    tag = tmp_path / "local"
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0, probe_timeout=0.5)
    try:
        one = filled(adapters=[{"name": "first", "uri": f"file://{first}"}])
        runner.apply("chat", one, 1)
        status = wait_for(runner, "chat", "Running")
        pid = status.replicas[0].pid
        two = filled(adapters=[{"name": "second", "uri": f"file://{second}"}])
        swapped = runner.apply("chat", two, 2)
        assert swapped.replicas[0].pid == pid and swapped.revision == 2
        ai = client_for(status.endpoint)
        reply = ai.chat.completions.create(
            model="second", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content.startswith("Hello from second.")
        with pytest.raises(openai.NotFoundError):
            ai.chat.completions.create(model="first", messages=[{"role": "user", "content": "hi"}])
        # Anything else changed: a new process, given the adapters at its start.
        three = filled(
            adapters=[{"name": "second", "uri": f"file://{second}"}],
            serving={"maxConcurrentRequests": 3},
        )
        runner.apply("chat", three, 3)
        restarted = wait_for(runner, "chat", "Running")
        assert restarted.replicas[0].pid != pid
        assert f"second={second}" in proc.proc_cmdline(restarted.replicas[0].pid)
    finally:
        runner.shutdown()
    assert servers_tagged(tag) == []
