"""The wizard's Compute step on a local profile whose catalog is this machine without GPUs:
the CPU is ServeDeck's choice, no GPU kind the machine does not have is offered, and the
memory written is what Check model sized against the machine. Through the views."""

import re

import pytest

from jobs.machine_catalog import MachineReadings, machine_catalog
from jobs.models import Profile
from models_catalog.sizing import GiB
from tests.jobs.wizard.test_wizard_views import M, get_path, start, text, url

# "t4" as a word, not inside a CSRF token or a draft key that happens to hold it
T4 = re.compile(r"(?<![\w-])t4(?![\w-])")


@pytest.fixture
def cpu_only_local(org):
    profile = Profile.objects.get(organization=org, name="local")
    profile.machine_catalog = machine_catalog(MachineReadings(cores=4, memory_bytes=32 * GiB))
    profile.save()
    return profile


def test_compute_on_a_cpu_only_machine_offers_its_cpu(as_deployer, cpu_only_local):
    draft = start(as_deployer)
    check = text(as_deployer.get(url("check", draft)))
    assert "Deploy it on CPU (21Gi memory)" in check
    assert not T4.search(check)
    body = text(as_deployer.get(url("compute", draft)))
    assert re.findall(r'name="gpu_kind" value="([\w-]+)"', body) == ["cpu"]
    assert re.search(r'CPU only</span><span class="badge good">ServeDeck\'s choice', body)
    assert "no GPU: 4 cores, 32.0 GiB of memory" in body
    # Qwen's model master asks for 2 requests at once: their KV cache, 2 x 1.75 GiB, x 4 is
    # still below what the weights need.
    assert (
        "Memory needed: 21.0 GiB of memory on the CPU at 32768 tokens × 2 requests at once; "
        "the machine has 32.0 GiB (weights 14.2 GiB, KV cache 56.0 KiB per token)."
    ) in body
    assert "KV cache 56.0 KiB per token" in body  # the same figure as Check model's
    assert not T4.search(body)
    draft.refresh_from_db()
    assert get_path(draft.manifest, f"{M}.resources.accelerator") is None
    assert get_path(draft.manifest, f"{M}.resources.memory") == "21Gi"


def test_a_machine_too_small_greys_the_cpu(as_deployer, org):
    profile = Profile.objects.get(organization=org, name="local")
    profile.machine_catalog = machine_catalog(MachineReadings(cores=2, memory_bytes=8 * GiB))
    profile.save()
    draft = start(as_deployer)
    check = text(as_deployer.get(url("check", draft)))
    assert "too large for this profile, which has no GPU" in check
    assert "cpu has 8.0 GiB" in check
