"""The defaults that depend on the model itself (pure): its context window, the memory that
holds it on CPU, the commit its hf:// revision is pinned to, and a virtual machine's GPU kind.
The one place they are decided, for every surface: the manifest's fill (YAML, REST API, CLI)
calls `model_defaults`, and the wizard pre-fills its draft with what that fill decided, so
`get` shows what Review did.

The GPU a model is put on is otherwise not decided here: without resources.accelerator a
manifest runs on CPU, a container asking for GPUs of no kind gets any GPU, and the wizard's
Compute step offers Check model's choice of GPU (jobs/wizard/sizing). A virtual machine needs a
kind (its GPUs are passed through by device name): when it asks for GPUs of no kind, it gets
the one Check model's sizing prefers among those it may have (`vm_gpu_kind`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from jobs.machine_catalog import gpu_kinds, kubevirt_device_name

from .context import ModelFacts, ProfileFacts
from .quantity import parse_bytes
from .uri import UriInfo
from .view import dig

GIB = 2**30
# Memory vLLM needs to start on CPU (MEMORY_DEFAULTS["generative-cpu"]): the least it is given.
BUILT_IN_CPU_MEMORY = 4 * GIB
RUNTIME_BYTES = GIB  # the runtime itself, beside the weights
CPU_KV_SHARE = 4  # on CPU the KV cache defaults to a quarter of the replica's memory


@dataclass(frozen=True)
class VmGpus:
    """A virtual machine's GPUs asked for without a kind: GPUs per node, nodes, and the kinds
    of the profile's catalog it may have."""

    count: int
    nodes: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class DefaultsAsked:
    """What the manifest says that the model-dependent defaults depend on (from the fill)."""

    uri: UriInfo | None  # as given
    vllm_fields: bool  # serving.maxContextTokens reaches a vLLM the platform runs
    generative_on_cpu: bool  # a generative model without resources.accelerator
    context_given: bool
    memory_given: bool
    master_context: int | None = None  # the model master's maxContextTokens
    # The application being changed: its filled manifest, and whether it has served.
    existing: Mapping[str, Any] | None = None
    served: bool = False
    vm_gpus: VmGpus | None = None  # a virtual machine's GPUs of no kind


@dataclass(frozen=True)
class ModelDefaults:
    """The values filled in where the manifest does not set them; None: no model-dependent
    default applies (the field is given, or the built-in default holds)."""

    context_tokens: int | None = None  # serving.maxContextTokens
    memory: int | None = None  # resources.memory, bytes
    uri: str | None = None  # spec.source.model.uri pinned to a commit
    gpu_model: str | None = None  # resources.accelerator.gpu.model of a virtual machine

    @property
    def any(self) -> bool:
        filled = (self.context_tokens, self.memory, self.uri, self.gpu_model)
        return any(value is not None for value in filled)


def context_over_limit(tokens: object, limit: int | None) -> bool:
    """The one decision on the context window against the model's own limit."""
    return isinstance(tokens, int) and limit is not None and tokens > limit


def default_context(master_context: int | None, model_limit: int | None) -> int | None:
    """The model master's context window, unless it is above the model's own limit (the model
    would not start): then the runtime's own default (None), which is that limit."""
    if master_context is None or context_over_limit(master_context, model_limit):
        return None
    return master_context


def cpu_replica_bytes(weight_bytes: int, kv_bytes: int = 0) -> int:
    """Memory one replica needs on CPU, in whole GiB: the weights and the runtime in three
    quarters of it, and the KV cache asked for in the quarter left. The one formula: Check
    model sizes with it, and the default memory below is it."""
    share = Fraction(CPU_KV_SHARE, CPU_KV_SHARE - 1)
    needed = max((weight_bytes + RUNTIME_BYTES) * share, kv_bytes * CPU_KV_SHARE)
    return max(1, math.ceil(needed / GIB)) * GIB


def cpu_memory(weight_bytes: int | None) -> int | None:
    """The default memory of a generative model on CPU: what holds its weights and the
    runtime with the default KV cache (cpu_replica_bytes); None when the built-in default
    already holds it or the weights are unknown."""
    if not weight_bytes:
        return None
    memory = cpu_replica_bytes(weight_bytes)
    return memory if memory > BUILT_IN_CPU_MEMORY else None


def pinned_uri(
    uri: UriInfo | None,
    commit: str | None,
    existing: Mapping[str, Any] | None = None,
    served: bool = False,
) -> str | None:
    """hf://<repo>:<commit> for an hf:// uri that names no commit (no revision, a branch or a
    tag): the commit Check model resolved it to, so a restart or a rollback serves the same
    bytes. A model that has served keeps the commit it was pinned to (the uri is fixed then),
    so applying the same manifest again after the branch moved changes nothing."""
    if uri is None or uri.scheme != "hf" or uri.pinned or uri.hf_repo is None:
        return None
    before = dig(existing, "spec", "source", "model", "uri") if existing else None
    if served and isinstance(before, str):
        if before == uri.text:
            return None  # served unpinned before this console pinned: it stays as it served
        repo, revision = _hf_parts(before)
        if repo == uri.hf_repo.lower() and revision is not None and len(revision) == 40:
            return before
    if not commit:
        return None
    return f"hf://{uri.hf_repo}:{commit}"


def model_defaults(asked: DefaultsAsked, model: ModelFacts | None) -> ModelDefaults:
    """The model-dependent defaults for a manifest: what the fill writes where it sets none.
    `model` is what Check model found (None: not asked, or it could not read the model)."""
    context = None
    if asked.vllm_fields and not asked.context_given:
        limit = model.max_context_tokens if model is not None else None
        context = default_context(asked.master_context, limit)
    memory = None
    if asked.generative_on_cpu and not asked.memory_given:
        # Unknown model (the Hub is down): what the application runs with is kept.
        memory = cpu_memory(model.weight_bytes) if model is not None else _kept_memory(asked)
    uri = pinned_uri(
        asked.uri, model.commit if model is not None else None, asked.existing, asked.served
    )
    gpu = vm_gpu_kind(asked.vm_gpus, model)
    return ModelDefaults(context_tokens=context, memory=memory, uri=uri, gpu_model=gpu)


def vm_kinds(profile: ProfileFacts | None, vendor: str | None) -> tuple[str, ...]:
    """The catalog's GPU kinds a virtual machine on `profile` may have: of `vendor`, with a
    device name, and that device permitted by KubeVirt when the profile knows which are."""
    if profile is None:
        return ()
    permitted = profile.kubevirt_devices
    found = []
    for kind in gpu_kinds(profile.machine_catalog):
        device = kubevirt_device_name(kind)
        if kind.get("vendor", "nvidia") != (vendor or "nvidia") or device is None:
            continue
        if permitted is None or device in permitted:
            found.append(kind["name"])
    return tuple(found)


def vm_gpu_kind(asked: VmGpus | None, model: ModelFacts | None) -> str | None:
    """The GPU kind of a virtual machine that asks for GPUs of no kind: the first of Check
    model's choices (fewest nodes, fewest GPUs, smallest GPU) that holds the model on the GPUs
    and nodes asked and that the machine may have; None when Check model could not size the
    model or no kind does."""
    if asked is None or model is None:
        return None
    for fit in model.gpu_fits:
        if fit.kind in asked.kinds and fit.gpus <= asked.count and fit.nodes <= asked.nodes:
            return fit.kind
    return None


def _kept_memory(asked: DefaultsAsked) -> int | None:
    """Check model could not read the model (the Hub is down): an application that exists
    keeps the memory it runs with rather than fall to the built-in, which may not hold it."""
    model = dig(asked.existing, "spec", "source", "model") if asked.existing else None
    if not isinstance(model, Mapping) or asked.uri is None:
        return None
    if dig(model, "resources", "accelerator") is not None:
        return None
    before_uri = model.get("uri")
    same = isinstance(before_uri, str) and (
        before_uri == asked.uri.text
        or (asked.uri.hf_repo is not None and _hf_parts(before_uri)[0] == asked.uri.hf_repo.lower())
    )
    memory = dig(model, "resources", "memory")
    if not same or not isinstance(memory, str):
        return None
    try:
        amount = parse_bytes(memory)
    except ValueError:
        return None
    return amount if amount > BUILT_IN_CPU_MEMORY else None


def _hf_parts(text: str) -> tuple[str | None, str | None]:
    """The repository (lowercase) and revision of an hf:// uri text; (None, None) otherwise."""
    if not text.startswith("hf://"):
        return None, None
    repo, _, revision = text.removeprefix("hf://").partition(":")
    return repo.lower(), revision or None
