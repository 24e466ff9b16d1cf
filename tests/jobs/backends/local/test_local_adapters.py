"""LoRA adapters on the local backend: served by vLLM only (its CPU build or on a GPU), from
folders under the models folder resolved where they are used, or from hf:// repositories
downloaded at apply (the adapter's own files, at the commit pinned then) from the fake Hub,
with the flags the platform sets.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import openai
import pytest

from jobs.backends.local import download_files, serving_plan
from jobs.backends.local.command import local_command
from jobs.backends.local.replica_start import vllm_cpu_settings
from jobs.backends.local.state import AppState
from jobs.manifest.adapters import MAX_RANK
from tests.jobs.backends.local import test_local_runtime_choice as choice
from tests.jobs.backends.local.test_local_cpu_wiring import manifest
from tests.jobs.backends.local.test_local_runtime_choice import on_gpu

vllm_machine = choice.vllm_machine  # the fixture: vLLM and every CPU runtime installed

PATH = "spec.source.model.adapters"
LORA_REPO = "acme/smol-support-lora"
LORA_DIR = Path(__file__).parents[3] / "fakes" / "hub_repos" / "acme" / "smol-support-lora"


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


def test_an_adapter_outside_the_models_folder_or_in_a_bucket_is_refused_by_its_field(
    vllm_machine, tmp_path
):
    _, folder = vllm_machine
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    base = on_gpu(manifest("chat", f"file://{folder}"))
    refused = serving_plan.plan(with_adapters(base, ("a", f"file://{outside}")))
    assert isinstance(refused, serving_plan.Refused) and refused.field == f"{PATH}[0].uri"
    assert refused.message.startswith(f"{PATH}[0].uri file://") and "outside" in refused.message
    refused = serving_plan.plan(with_adapters(base, ("a", "s3://loras/support")))
    assert isinstance(refused, serving_plan.Refused) and refused.field == f"{PATH}[0].uri"
    assert "does not download s3:// adapters" in refused.message


def test_an_hf_adapter_is_planned_at_the_commit_its_revision_points_at(
    vllm_machine, fake_hub_server
):
    """Read from the fake Hub through huggingface_hub: the commit, and the adapter's own files
    with their sizes (not the repository's .gitattributes)."""
    _, folder = vllm_machine
    base = on_gpu(manifest("chat", f"file://{folder}"))
    chosen = serving_plan.plan(with_adapters(base, ("support", "hf://acme/smol-support-lora")))
    assert isinstance(chosen, serving_plan.Plan), chosen
    (download,) = chosen.adapters
    sha = fake_hub_server.repos["acme/smol-support-lora"].sha
    assert (download.name, download.repo, download.commit) == ("support", LORA_REPO, sha)
    assert dict(download.files) == {
        "adapter_config.json": (LORA_DIR / "adapter_config.json").stat().st_size,
        "adapter_model.safetensors": 1843200,
    }
    missing = serving_plan.plan(with_adapters(base, ("gone", "hf://acme/no-such-lora")))
    assert isinstance(missing, serving_plan.Refused) and missing.field == f"{PATH}[0].uri"
    assert missing.message.startswith(f"{PATH}[0].uri: hf://acme/no-such-lora cannot be read")
    not_lora = serving_plan.plan(
        with_adapters(base, ("x", "hf://HuggingFaceTB/SmolLM2-135M-Instruct"))
    )
    assert isinstance(not_lora, serving_plan.Refused) and not_lora.field == f"{PATH}[0].uri"
    assert "has no adapter_config.json and adapter_model.safetensors" in not_lora.message


@pytest.mark.parametrize(
    "names, expected",
    [
        (["adapter_config.json"], None),
        (["adapter_model.safetensors", "README.md"], None),
        (["adapter_config.json", "adapter_model.bin"], None),  # vLLM is given safetensors
        (
            ["README.md", ".gitattributes", "adapter_model.safetensors", "adapter_config.json",
             "optimizer.pt", "training_args.bin", "tokenizer.json", "tokenizer_config.json",
             "checkpoint-100/adapter_model.safetensors", "model.safetensors"],
            ["adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
             "tokenizer_config.json"],
        ),
    ],
)  # fmt: skip
def test_only_an_adapters_own_files_are_downloaded(names, expected):
    assert download_files.adapter_files_to_download(names) == expected


def test_an_hf_adapter_is_downloaded_at_apply_and_given_to_the_server_by_folder(
    tmp_path, settings, fake_hub_server
):
    """The runner fetches the adapter's files from the fake Hub into the downloads folder at
    the commit pinned at apply and starts the stand-in with --lora-modules NAME=<that folder>;
    the same process answers to it by name. A snapshot that went missing is not served: the
    replica says to deploy again."""
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

    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    sha = fake_hub_server.repos[LORA_REPO].sha
    snapshot = tmp_path / "downloads" / "models--acme--smol-support-lora" / "snapshots" / sha
    tag = tmp_path / "local"
    runner = LocalRunner(tag, template=stand_in(tag), grace_seconds=1.0, probe_timeout=0.5)
    fake_hub_server.reset_log()
    try:
        doc = filled(adapters=[{"name": "support", "uri": f"hf://{LORA_REPO}"}])
        runner.apply("chat", doc, 1)
        fetched = sorted(
            r.path.rsplit("/", 1)[1]
            for r in fake_hub_server.requests
            if r.method == "GET" and "/resolve/" in r.path
        )
        assert fetched == ["adapter_config.json", "adapter_model.safetensors"]
        assert sorted(p.name for p in snapshot.iterdir()) == fetched
        assert (snapshot / "adapter_model.safetensors").stat().st_size == 1843200
        status = wait_for(runner, "chat", "Running")
        assert f"support={snapshot}" in proc.proc_cmdline(status.replicas[0].pid)
        reply = client_for(status.endpoint).chat.completions.create(
            model="support", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content.startswith("Hello from support.")
        # Applied again: nothing fetched again, the same process keeps serving.
        fake_hub_server.reset_log()
        again = runner.apply("chat", doc, 2)
        assert again.replicas[0].pid == status.replicas[0].pid
        assert not [r for r in fake_hub_server.requests if "/resolve/" in r.path]
        # The downloads folder lost it: a restart is refused, naming the adapter's field.
        shutil.rmtree(snapshot)
        restarted = runner.restart("chat")
        assert restarted.phase == "Failed", restarted
        assert restarted.replicas[0].pid is None  # never spawned
        said = "\n".join(runner.tail("chat", 200))
        assert f"{PATH}[0].uri: hf://{LORA_REPO} at commit {sha} is no longer" in said
        assert "deploy again to download it" in said
    finally:
        runner.shutdown()
    assert servers_tagged(tag) == []


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
