"""Check model for a profile: its Hugging Face token, machine catalog and vLLM version, and what
the manifest rules learn from the answer."""

import os

from jobs.manifest import ModelFacts
from models_catalog.check import CheckResult, check_model

GENERATIVE_TASKS = {"generate", "embed", "score", "transcribe"}


def hf_token_for(profile) -> str | None:
    """The token the profile names. `env/VAR` is read here; `secret/NAME` lives on the cluster,
    where the runtime reads it, so Check model asks the Hub without it."""
    ref = profile.hf_token_ref or ""
    if ref.startswith("env/"):
        return os.environ.get(ref[len("env/") :]) or None
    return None


def check_for_profile(
    uri: str,
    profile,
    *,
    context_tokens: int | None = None,
    concurrency: int = 1,
    format: str | None = None,
    gpu_memory_utilization: float | None = None,
) -> CheckResult:
    result = check_model(
        uri,
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


def model_facts(result: CheckResult) -> ModelFacts | None:
    """What the manifest rules may check against, once the model's config has been read."""
    if result.inconclusive or result.architecture is None:
        return None
    generative = None if result.task is None else result.task in GENERATIVE_TASKS
    return ModelFacts(
        generative=generative,
        modalities=frozenset(result.modalities),
        max_context_tokens=result.max_context_tokens,
    )


def context_over_limit(result: CheckResult) -> bool:
    """The check refused only because the asked context exceeds the model's own limit: the
    manifest rule on serving.maxContextTokens reports that, at its field."""
    asked, limit = result.context_tokens, result.max_context_tokens
    return asked is not None and limit is not None and asked > limit
