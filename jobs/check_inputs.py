"""Check model for a profile: the plain inputs models_catalog.check takes (the machine catalog,
the Hugging Face token, the vLLM version, and on the local profile the organisation's GPU
profiles), built from the profile here, in jobs, so that models_catalog never reads a
Profile."""

import os

from jobs.backends.local.command import DEFAULT_TEMPLATE, configured_template
from jobs.backends.local.machine_check import free_memory
from jobs.manifest.rules import file_on_kubernetes
from jobs.models import Cluster, Profile
from jobs.token_refs import env_token
from models_catalog.check import check_model
from models_catalog.check_types import CheckResult


def hf_token_for(profile) -> str | None:
    """The token the profile names. `env/VAR` is read here, only when the operator allowed VAR
    for the profile's organisation; `secret/NAME` lives on the cluster, where the runtime
    reads it, so Check model asks the Hub without it."""
    allowed = profile.organization.token_variables
    return env_token(profile.hf_token_ref or "", allowed, os.environ)


def check_for_profile(
    uri: str,
    profile,
    *,
    context_tokens: int | None = None,
    concurrency: int = 1,
    format: str | None = None,
    gpu_memory_utilization: float | None = None,
    wants_gpu: bool | None = None,
) -> CheckResult:
    """Check model of `uri` on `profile`. `wants_gpu`: whether the manifest's replica asks for
    a GPU (resources.accelerator), which decides the local backend's server; None when there
    is no manifest yet."""
    if uri.startswith("file://") and profile.cluster.backend != "local":
        # A folder on the console's machine is the local profile's: Check model on another
        # profile does not read the console's disk for whoever asks.
        why, fix = file_on_kubernetes(uri, profile.name)
        return CheckResult(uri=uri, can_serve=False, verdict=f"uri: {why}", next_step=fix)
    # The local backend chooses the server on this machine (SERVEDECK_LOCAL_COMMAND, when set,
    # names one itself): Check model says which, and that it fits the free memory.
    local = profile.cluster.backend == "local" and configured_template() == DEFAULT_TEMPLATE
    result = check_model(
        uri,
        on_this_machine=local,
        # This machine's memory as it is now: the CPU runtimes serve the model beside
        # whatever else runs here.
        free_memory=free_memory() if local else None,
        wants_gpu=wants_gpu,
        # Where a model this machine cannot serve would run: named in the refusal.
        gpu_profiles=kubernetes_catalogs(profile.organization_id) if local else None,
        catalog=profile.machine_catalog,
        vllm_version=profile.vllm_version,
        hf_token=hf_token_for(profile),
        context_tokens=context_tokens,
        concurrency=concurrency,
        format=format,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    if (
        not result.can_serve
        and profile.hf_token_ref.startswith("secret/")
        and "gated" in (result.verdict.lower())
    ):
        result.next_step += (
            f" The profile's token is the Kubernetes Secret {profile.hf_token_ref[7:]}, which "
            "the console does not read; give the profile an env/ token reference for Check model."
        )
    return result


def kubernetes_catalogs(organization_id: int) -> dict[str, list]:
    """The machine catalogs of the organisation's Kubernetes profiles, by profile name (Check
    model keeps those with an NVIDIA GPU kind that holds the model)."""
    profiles = Profile.objects.filter(
        organization_id=organization_id, cluster__backend=Cluster.Backend.KUBERNETES
    ).only("name", "machine_catalog")
    return {p.name: p.machine_catalog for p in profiles}
