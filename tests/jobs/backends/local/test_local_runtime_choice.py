"""One choice of model server on the local profile, runtimes.choose_runtime's, for Check model,
the dry run and the local backend alike, on a machine where vLLM is installed (a `vllm` on the
PATH that nothing here runs): vLLM serves a replica that asks for a GPU and a model it loads;
a CTranslate2 Whisper, and any replica that asks for no GPU, get their CPU runtime.

The Hub is the suite's fake Hub (the real huggingface_hub client against it); the CPU
runtimes are the stand-ins of test_local_cpu_wiring, installed where the console looks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import deploy as verbs
from jobs.backends.local import runtimes as rt
from jobs.backends.local import serving_plan
from jobs.dry_run import check_for_profile
from jobs.machine_catalog import GpuReading, MachineReadings, machine_catalog
from jobs.models import Profile
from tests.fakes.cpu_runtime import install_fake
from tests.jobs.backends.local.test_local_cpu_wiring import chat_folder, manifest
from tests.manifest_text import local_manifest

WHISPER = "hf://Systran/faster-whisper-tiny.en"
L4 = {"gpu": {"model": "L4", "countPerReplica": 1}}


@pytest.fixture
def vllm_machine(cpu_machine, settings, tmp_path, org):
    """cpu_machine with vLLM installed and every CPU runtime too; the local profile's catalog
    is a machine without GPUs, as discovery makes it here."""
    runtimes, models = cpu_machine
    vllm = Path(os.environ["PATH"]) / "vllm"
    vllm.write_text("#!/bin/sh\nexit 1\n")
    vllm.chmod(0o755)
    assert rt.vllm_installed()
    for name in rt.CPU_RUNTIMES:
        install_fake(runtimes, name)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    profile = Profile.objects.get(organization=org, name="local")
    profile.machine_catalog = machine_catalog(
        MachineReadings(cores=2, memory_bytes=16 * 2**30, gpus=())
    )
    profile.save()
    return profile, chat_folder(models)


def on_gpu(doc: dict) -> dict:
    doc["spec"]["source"]["model"]["resources"]["accelerator"] = L4
    return doc


def planned(doc: dict) -> str:
    chosen = serving_plan.plan(doc)
    assert isinstance(chosen, serving_plan.Plan), chosen
    return chosen.runtime


def checked(uri: str, profile, wants_gpu: bool | None) -> str:
    result = check_for_profile(uri, profile, wants_gpu=wants_gpu)
    assert result.can_serve, (result.verdict, result.next_step)
    said = [
        w for w in result.warnings if w.startswith(f"On this machine it runs on {result.runtime}")
    ]
    assert said, result.warnings
    return result.runtime


def test_a_ctranslate2_whisper_from_the_hub_gets_faster_whisper_where_vllm_is_installed(
    vllm_machine,
):
    profile, _ = vllm_machine
    doc = manifest("whisper", WHISPER)
    assert planned(doc) == "faster-whisper"  # the backend, as Check model says
    assert checked(WHISPER, profile, wants_gpu=False) == "faster-whisper"
    assert checked(WHISPER, profile, wants_gpu=None) == "faster-whisper"
    # Asked on a GPU, neither sends it to vLLM, which cannot load it: both refuse, alike.
    refused = serving_plan.plan(on_gpu(doc))
    assert isinstance(refused, serving_plan.Refused)
    assert "vLLM does not load a CTranslate2 checkpoint" in refused.message
    on_gpus = check_for_profile(WHISPER, profile, wants_gpu=True)
    assert not on_gpus.can_serve and on_gpus.verdict == refused.message


def test_a_replica_without_a_gpu_runs_on_the_cpu_runtime_and_one_on_a_gpu_on_vllm(vllm_machine):
    profile, folder = vllm_machine
    uri = f"file://{folder}"
    assert planned(manifest("chat", uri)) == "transformers"
    assert checked(uri, profile, wants_gpu=False) == "transformers"
    assert planned(on_gpu(manifest("chat", uri))) == "vllm"
    assert checked(uri, profile, wants_gpu=True) == "vllm"
    # hf:// too: the Hub is read for the choice, wherever vLLM is installed.
    chat = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
    assert planned(manifest("chat", chat)) == "transformers"
    assert planned(on_gpu(manifest("chat", chat))) == "vllm"


def test_without_a_manifest_check_model_says_what_the_wizard_would_deploy(vllm_machine):
    """Check model's page (no manifest): on the GPU it suggests where the local profile's
    catalog has one, on the CPU where it has none."""
    profile, folder = vllm_machine
    uri = f"file://{folder}"
    assert checked(uri, profile, wants_gpu=None) == "transformers"
    profile.machine_catalog = machine_catalog(
        MachineReadings(cores=8, memory_bytes=64 * 2**30, gpus=(GpuReading("NVIDIA L4", 23034),))
    )
    profile.save()
    assert checked(uri, profile, wants_gpu=None) == "vllm"


def test_the_dry_run_and_the_backend_agree_on_the_runtime(vllm_machine, org):
    """The dry run asks Check model with the manifest's GPU, and the backend's preflight plans
    with the same manifest: one runtime, said once."""
    _, folder = vllm_machine
    doc = local_manifest("chat", f"file://{folder}")
    run = verbs.dry_run(doc, org)
    assert run.ok, [str(p) for p in run.refusals]
    assert run.check.runtime == "transformers" == planned(run.manifest)
    said = [p.message for p in run.warnings if "On this machine it runs on" in p.message]
    assert len(said) == 1 and "asks for no GPU" in said[0], said


# ---- a model no CPU runtime serves: the organisation's profiles that would ----


def kubernetes_profile(org, name: str, catalog: list, tmp_path) -> Profile:
    from jobs.models import Cluster

    kubeconfig = tmp_path / f"{name}.kubeconfig"
    kubeconfig.write_text("")
    cluster = Cluster.objects.create(
        organization=org, name=name, backend="kubernetes", kubeconfig_path=str(kubeconfig),
        context="x", addons=["kserve"],
    )  # fmt: skip
    return Profile.objects.create(
        organization=org, name=name, cluster=cluster, namespace="models", machine_catalog=catalog
    )


def gpu(name: str, memory: str, per_node: int = 1) -> dict:
    return {"name": name, "vendor": "nvidia", "gpuMemory": memory, "gpusPerNode": per_node,
            "nodes": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("uri", "named"),
    [
        # 2.4 GB of float32 weights: any NVIDIA GPU holds it
        ("hf://nvidia/parakeet-tdt-0.6b-v3", "profile gpu-prod or profile t4-pool"),
        # 61 GB of bf16 weights: one 80 GB GPU does, one 16 GB GPU does not
        ("hf://Qwen/Qwen3-30B-A3B", "profile gpu-prod,"),
    ],
)
def test_a_refusal_names_the_organisations_profiles_whose_gpus_hold_the_model(
    cpu_machine, org, other_org, tmp_path, uri, named
):
    local = Profile.objects.get(organization=org, name="local")
    local.machine_catalog = machine_catalog(
        MachineReadings(cores=64, memory_bytes=512 * 2**30, gpus=())
    )
    local.save()
    general = check_for_profile(uri, local)
    assert not general.can_serve
    assert f"Use {rt.GPU_PROFILE}" in general.verdict  # no such profile: what kind would
    assert "deploy it to" not in general.verdict

    kubernetes_profile(org, "gpu-prod", [gpu("h100", "81559Mi", 8)], tmp_path)
    kubernetes_profile(org, "t4-pool", [gpu("t4", "15360Mi")], tmp_path)
    kubernetes_profile(org, "cpu-only", [{"name": "cpu", "gpusPerNode": 0}], tmp_path)
    kubernetes_profile(other_org, "their-gpus", [gpu("h200", "143771Mi", 8)], tmp_path)
    refused = check_for_profile(uri, local)
    assert not refused.can_serve
    assert f"Deploy it to {named}" in refused.verdict, refused.verdict
    assert "whose NVIDIA GPUs hold it" in refused.verdict
    assert "cpu-only" not in refused.verdict and "their-gpus" not in refused.verdict
    assert rt.GPU_PROFILE not in refused.verdict
