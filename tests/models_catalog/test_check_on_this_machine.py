"""Check model on a local profile whose catalog is this machine: what it suggests fits that
machine (the CPU of a machine without GPUs, never a GPU kind it does not have), a model too
large for it is refused with the figures, and the page says so. Against the fake Hub."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from jobs.machine_catalog import DEFAULT_MACHINE_CATALOG, MachineReadings, machine_catalog
from jobs.models import Profile
from models_catalog.check import check_model
from models_catalog.check_types import SERVABLE
from models_catalog.sizing import GiB
from tests.fakes.hub import GOOD_TOKEN

# "t4" as a word, not inside a CSRF token or a draft key that happens to hold it
T4 = re.compile(r"(?<![\w-])t4(?![\w-])")

QWEN = "hf://Qwen/Qwen2.5-7B-Instruct"


def laptop(gib: int, cores: int = 4) -> list[dict]:
    return machine_catalog(MachineReadings(cores=cores, memory_bytes=gib * GiB))


def test_a_machine_without_gpus_is_offered_its_cpu(hub_env):
    # Qwen2.5-7B: (15_231_233_024 B of weights + 1 GiB) x 4/3 = 20.2 GiB -> 21 GiB
    result = check_model(QWEN, catalog=laptop(32))
    assert result.can_serve and result.verdict == SERVABLE
    assert result.suggestion.accelerator == "cpu"
    assert result.next_step.startswith("Deploy it on CPU (21Gi memory)")
    assert result.options == [] and result.unfit == []
    assert not T4.search(str(result.as_dict()))
    assert result.memory_text() == (
        "21.0 GiB of memory on the CPU at 32768 tokens; the machine has 32.0 GiB"
    )


def test_too_large_for_the_machine_is_refused_with_the_figures(hub_env):
    result = check_model(QWEN, catalog=laptop(8))
    assert not result.can_serve
    assert result.verdict == (
        "Qwen/Qwen2.5-7B-Instruct is too large for this profile, which has no GPU: on the CPU "
        "it needs 21.0 GiB of memory (weights 14.2 GiB), and cpu has 8.0 GiB."
    )
    assert "smaller or quantised" in result.next_step
    assert result.unfit == [("cpu", "needs 21.0 GiB of memory on the CPU; cpu has 8.0 GiB")]


def test_a_shorter_context_is_offered_when_that_fits(hub_env):
    # 32768 tokens of Llama-3.1-8B's cache: 4 GiB, x 4 = 16 GiB; its weights need 22 GiB: a
    # 24 GiB machine holds it at any context up to (24 GiB / 4) / 128 KiB = 49152 tokens.
    result = check_model(
        "hf://meta-llama/Llama-3.1-8B-Instruct", catalog=laptop(24), hf_token=GOOD_TOKEN
    )
    assert not result.can_serve
    assert "needs more memory than the 24.0 GiB of cpu holds" in result.verdict
    assert "it fits with at most 49,152 tokens" in result.verdict
    assert result.next_step == "Set serving.maxContextTokens to 49152 or less."


def test_deepseek_v3_is_sized_per_gpu(hub_env):
    """Issue 11: "727.5 GiB per GPU" next to "8 x h200" was one GPU's figure."""
    result = check_model("hf://deepseek-ai/DeepSeek-V3", catalog=DEFAULT_MACHINE_CATALOG)
    assert result.suggestion.describe() == "8 x h200 GPUs"
    text = result.memory_text()
    assert re.fullmatch(
        r"[\d.]+ GiB per GPU on 8 x h200 GPUs at 163840 tokens, [\d.]+ GiB in all", text
    )
    per_gpu = float(text.split(" GiB")[0])
    assert per_gpu * GiB == pytest.approx(result.suggestion.needed_per_gpu_bytes, rel=0.001)
    assert per_gpu < 140  # an h200 has 140.4 GiB


@pytest.fixture
def cpu_only_local(org):
    profile = Profile.objects.get(organization=org, name="local")
    profile.machine_catalog = laptop(32)
    profile.save()
    return profile


def test_check_model_page_on_a_cpu_only_local_profile(as_viewer, cpu_only_local):
    page = as_viewer.get(reverse("models_catalog:check"), {"uri": QWEN}).content.decode()
    page = re.sub(r"\s+", " ", page)
    assert "Deploy it on CPU (21Gi memory)" in page
    assert "21.0 GiB of memory on the CPU at 32768 tokens; the machine has 32.0 GiB" in page
    assert "<dd>56.0 KiB per token</dd>" in page  # the one byte format (it said 0.1 MiB)
    assert not T4.search(page) and "Machines that cannot hold it" not in page


def test_checkmodel_cli_on_a_cpu_only_local_profile(admin, cpu_only_local):
    out = StringIO()
    call_command("checkmodel", QWEN, "--profile", "local", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "suggested:      CPU (21Gi memory)" in text
    assert "memory needed:  21.0 GiB of memory on the CPU at 32768 tokens" in text
    assert "KV cache:       56.0 KiB per token" in text
    assert not T4.search(text)


def test_the_t4_search_finds_what_the_issue_saw():
    """The searches above can fail: they find t4 as the pages said it, not inside tokens."""
    assert T4.search("Deploy it on 1 x t4 GPU.") and T4.search('name="gpu_kind" value="t4"')
    assert not T4.search('csrfmiddlewaretoken" value="aB3t4Xz"') and not T4.search("gpt4-t4x")
