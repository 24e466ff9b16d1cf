"""Why Check model says a model cannot serve: each refusal names what is wrong and what to do,
from what the Hub, the architecture lists and the sizing found."""

from __future__ import annotations

from dataclasses import replace

from jobs.machine_catalog import is_gpu_kind
from models_catalog import hub
from models_catalog.architectures import Unsupported
from models_catalog.check_types import CheckResult, HubRequest
from models_catalog.sizing import (
    MAX_GPUS,
    Demand,
    Sizing,
    human_bytes,
    kind_nodes,
    largest_kind,
    largest_machine,
    machine_memory,
    max_context_that_fits,
)

OTHER_WEIGHT_SUFFIXES = (".onnx", ".h5", ".msgpack", ".pt", ".pth", ".ckpt", ".nemo", ".tflite")


def refuse(base: CheckResult, verdict: str, next_step: str, **known) -> CheckResult:
    """`base` answered as cannot serve: `verdict` says why, `next_step` what to do."""
    return replace(base, can_serve=False, verdict=verdict, next_step=next_step, **known)


def too_large(
    result: CheckResult, request: HubRequest, demand: Demand, sizing: Sizing, context: int
) -> CheckResult:
    """Nothing in the catalog holds the model: the context that would fit, else what the
    largest GPU kind (or, with none, the largest machine without GPUs) lacks."""
    usable = [
        kind
        for kind in request.catalog
        if not is_gpu_kind(kind) or kind.get("vendor", "nvidia") == "nvidia"
    ]
    biggest = largest_kind(usable)
    machine = largest_machine(usable) if biggest is None else None
    if biggest is None and machine is None:
        return refuse(
            result,
            "The profile's machine catalog has no NVIDIA GPU kinds, and no machine without "
            "GPUs with its memory given, to run it on.",
            "Add GPU kinds (or this machine) to the profile's machine catalog.",
        )
    fits = max_context_that_fits(demand, usable, result.concurrency, context - 1)
    at_once = f" with {result.concurrency} requests at once" if result.concurrency > 1 else ""
    if biggest is not None:
        holder = f"{_most_gpus(biggest)} {biggest['name']} GPUs hold"
    else:
        holder = f"the {human_bytes(machine_memory(machine))} of {machine['name']} holds"
    if fits:
        return refuse(
            result,
            f"At {context:,} tokens of context{at_once}, {request.repo} needs more memory "
            f"than {holder}; it fits with at most {fits:,} tokens.",
            f"Set serving.maxContextTokens to {fits} or less"
            + (", or lower serving.maxConcurrentRequests." if result.concurrency > 1 else "."),
        )
    if biggest is None:
        return refuse(
            result,
            f"{request.repo} is too large for this profile, which has no GPU: on the CPU it "
            f"needs {human_bytes(sizing.cpu_memory_bytes)} of memory (weights "
            f"{human_bytes(demand.weight_bytes)}), and {machine['name']} has "
            f"{human_bytes(machine_memory(machine))}.",
            "Pick a smaller or quantised version of the model, or use a profile with GPUs "
            "that hold it.",
        )
    why = dict(sizing.unfit)[biggest["name"]]
    return refuse(
        result,
        f"{request.repo} is too large for {_most_gpus(biggest)} GPUs of the largest kind in the "
        "catalog "
        f"({biggest['name']}): its weights alone are {human_bytes(demand.weight_bytes)}, and it "
        f"{why}.",
        "Pick a smaller or quantised version of the model (an FP8, AWQ or GPTQ repository), or "
        "add a machine kind with more GPU memory to the profile's catalog.",
    )


def _most_gpus(kind) -> int:
    """The most GPUs of a kind one replica may span: all of its nodes' when the catalog says
    how many there are, else MAX_GPUS."""
    nodes = kind_nodes(kind)
    return MAX_GPUS if nodes is None else int(kind.get("gpusPerNode") or 1) * nodes


def unsupported(
    base: CheckResult, request: HubRequest, found: Unsupported, config: dict
) -> CheckResult:
    if base.custom_code and not (found.last_version or found.plugin or found.added_in):
        classes = ", ".join(sorted(set((config.get("auto_map") or {}).values()))) or "its own code"
        return refuse(
            base,
            f"{request.repo} needs custom code from its repository ({classes}, through auto_map), "
            f"and vLLM {request.vllm_version} has no built-in implementation of {found.name}; "
            "the platform does not run repository code.",
            "Pick a version of the model with a supported architecture (many are republished "
            "in a transformers-native form), or serve it with a runtime image of your own.",
        )
    return refuse(base, f"{found.reason}.", f"{found.fix}.")


def no_weights(base: CheckResult, request: HubRequest, info: hub.HubModelInfo) -> CheckResult:
    found = [name for name in info.file_names if name.endswith(OTHER_WEIGHT_SUFFIXES)]
    seen = f" (it has {', '.join(found[:4])})" if found else ""
    return refuse(
        base,
        f"{request.repo} has no weights vLLM reads: no .safetensors, PyTorch .bin or GGUF "
        f"files{seen}.",
        "Pick the repository that holds the model's safetensors weights, or convert the "
        "weights to safetensors and upload them.",
    )


def gguf_only(base: CheckResult, request: HubRequest) -> CheckResult:
    return refuse(
        base,
        f"{request.repo} holds only GGUF files; vLLM loads a single GGUF file with the original "
        "model's tokenizer, which a repository URI cannot point at.",
        "Point the URI at the original model's repository (safetensors weights) instead.",
    )


def no_config(base: CheckResult, request: HubRequest, info: hub.HubModelInfo) -> CheckResult:
    names = info.file_names
    if any(name.endswith(".gguf") for name in names):
        return gguf_only(base, request)
    if any(name.endswith(".nemo") for name in names):
        return refuse(
            base,
            f"{request.repo} is a NeMo checkpoint; the platform serves NeMo models only for "
            "Parakeet speech recognition.",
            "Pick a Parakeet model (e.g. hf://nvidia/parakeet-tdt-0.6b-v3) or a transformers "
            "version of this model.",
        )
    return refuse(
        base,
        f"{request.repo} has no config.json, so neither Check model nor vLLM can tell its "
        "architecture.",
        "Pick a transformers model repository (one with config.json and safetensors weights).",
    )


def hub_refusal(base: CheckResult, request: HubRequest, exc: hub.HubError) -> CheckResult:
    """The Hub answered, and the answer was no: gated, no access, bad token, no such repo."""
    repo, page = request.repo, f"{request.endpoint}/{request.repo}"
    if isinstance(exc, hub.GatedRepo) and not exc.has_token:
        return refuse(
            base,
            f"{repo} is gated, and the profile has no Hugging Face token to read it with.",
            f"Accept the model's terms at {page}, then add a Hugging Face token of that account "
            "to the profile.",
            about_token=True,
        )
    if isinstance(exc, hub.AccessDenied):
        return refuse(
            base,
            f"The profile's Hugging Face token has no access to the gated model {repo}.",
            f"Request access at {page} with the account that owns the token (approval can take "
            "a while), or use another account's token.",
            about_token=True,
        )
    if isinstance(exc, hub.InvalidToken):
        return refuse(
            base,
            "The Hugging Face Hub rejected the profile's token (wrong, expired or revoked).",
            "Replace the Hugging Face token on the profile with a valid read token.",
            about_token=True,
        )
    if isinstance(exc, hub.RevisionNotFound):
        return refuse(
            base,
            f"{repo} has no revision {exc.revision!r} (no branch, tag or commit of that name).",
            _revision_fix(request),
        )
    if isinstance(exc, hub.RepoNotFound):
        return refuse(
            base,
            f"There is no model {repo} on the Hugging Face Hub at {request.endpoint}, or it is "
            "private and the profile's token cannot see it.",
            "Check the repository id (org/name, as on its Hub page), or add a token that can "
            "read it to the profile.",
        )
    return refuse(
        base,
        f"Check model could not read {repo}: {exc}.",
        "Fix the repository, or pick another model.",
    )


def _revision_fix(request: HubRequest) -> str:
    try:
        sha = hub.model_info(request.repo, None, request.token, endpoint=request.endpoint).sha
    except hub.HubError:
        return f"Use a branch, tag or commit of {request.repo}, or leave the revision out."
    return f"Use a branch, tag or commit, e.g. its current main: hf://{request.repo}:{sha}."
