"""Facts the validator needs from outside the document, as plain frozen data.

The Django side builds these from profiles, the organisation and Check model; the manifest
core never touches the database, so these are all it knows about the world.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

ADDONS = frozenset(
    {"kserve", "keda", "kueue", "gatewayApi", "certManager", "localModelCache", "kubevirt"}
)
MODALITIES = frozenset({"image", "video", "audio"})

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ProfileFacts:
    """A deployment profile: where the model runs and what that cluster offers."""

    name: str
    namespace: str
    backend: Literal["local", "kubernetes"] = "kubernetes"
    # Entries like {"name": "l4", "vendor": "nvidia", "gpuMemory": "23034Mi",
    # "gpusPerNode": 8, "nodeCpu": "192", "nodeMemory": "768Gi", "nodeLabels": {...}}.
    machine_catalog: tuple[Mapping[str, Any], ...] = ()
    addons: frozenset[str] = frozenset()
    queues: tuple[str, ...] = ()
    # node group name -> cache capacity in bytes
    cache_node_groups: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    vllm_version: str = ""
    # Namespaces besides `namespace` that spec.namespace may name (an admin allows them).
    extra_namespaces: tuple[str, ...] = ()
    # The device names KubeVirt passes through to a virtual machine, as discovered; None when
    # unknown (not discovered, or not readable).
    kubevirt_devices: tuple[str, ...] | None = None

    @property
    def allowed_namespaces(self) -> tuple[str, ...]:
        """Where this profile's applications may go: its own namespace first."""
        return (self.namespace, *(n for n in self.extra_namespaces if n != self.namespace))


@dataclass(frozen=True)
class ExistingApplication:
    """The application being changed, as its latest revision left it."""

    manifest: Mapping[str, Any]  # the filled-in manifest of the latest revision
    created_at: datetime
    served_at: datetime | None = None  # first time it reached Running; None = never served


@dataclass(frozen=True)
class GpuFit:
    """A GPU kind of the profile's catalog that holds the model (Check model's sizing), with
    the fewest GPUs per node and nodes a replica needs of it."""

    kind: str
    gpus: int
    nodes: int = 1


@dataclass(frozen=True)
class ModelFacts:
    """What Check model learned about the artifact; None fields are unknown."""

    generative: bool | None = None
    modalities: frozenset[str] = frozenset()  # subset of MODALITIES; empty = text only
    max_context_tokens: int | None = None
    weight_bytes: int | None = None  # what memory on CPU must hold for the weights (as stored,
    # or as the CPU runtime serving it on this machine holds them)
    commit: str | None = None  # the commit an hf:// uri's revision (or main) resolved to
    # The profile's GPU kinds that hold the model, in Check model's order of preference (fewest
    # nodes, then fewest GPUs, then the smallest GPU).
    gpu_fits: tuple[GpuFit, ...] = ()


@dataclass(frozen=True)
class ManifestContext:
    profiles: Mapping[str, ProfileFacts]
    existing: ExistingApplication | None = None
    verified_domains: frozenset[str] = frozenset()
    access_policies: frozenset[str] = frozenset()
    model: ModelFacts | None = None
    # From the model's model master: dtype, quantization, reasoningParser, toolCallParser,
    # gpuMemoryUtilization, extraArgs. They replace the built-in defaults; user values win.
    engine_defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    master_name: str | None = None  # the model master engine_defaults come from, for messages
    master_context_tokens: int | None = None  # the master's context window (model_defaults)
    # Flags an operator's model server takes beyond the platform's list (flag -> value kind;
    # engine_flags.parse_extra_flags reads the SERVEDECK_EXTRA_ENGINE_FLAGS setting).
    extra_engine_flags: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
