"""What Check model's steps share: the question of one hf:// check (HubRequest: the model, the
token and Hub to ask, what to size it for) and the answer (CheckResult)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from jobs.manifest import UriInfo
from models_catalog import hub, hub_weights
from models_catalog.sizing import Suggestion, human_bytes

SERVABLE = "The platform can serve this model."


@dataclass
class CheckResult:
    """The answer to Check model. `verdict` is SERVABLE exactly when `can_serve`."""

    uri: str
    can_serve: bool
    verdict: str
    next_step: str
    inconclusive: bool = False  # the Hub could not be asked: try again
    runtime: str | None = None  # "vllm", "parakeet", or a predictive runtime
    task: str | None = None  # generate | embed | score | transcribe | predict
    architecture: str | None = None
    revision: str | None = None  # the pinned commit
    parameters: int | None = None
    weight_dtype: str | None = None
    weight_bytes: int | None = None  # as stored
    # As the CPU runtime that serves it on this machine holds them, when not as stored (vLLM's
    # CPU build serving 16-bit weights in float32 where the CPU has no bfloat16 instructions).
    cpu_weight_bytes: int | None = None
    # "hub" summary, safetensors "headers", the safetensors "index" total, or "file sizes"
    weight_source: str | None = None
    max_context_tokens: int | None = None
    context_tokens: int | None = None  # the context the memory is sized for
    concurrency: int = 1
    kv_bytes_per_token: int | None = None
    memory_needed_bytes: int | None = None  # on one GPU, over gpuMemoryUtilization
    cpu_memory_bytes: int | None = None  # a replica on the CPU (sizing.cpu_replica_bytes)
    suggestion: Suggestion | None = None
    options: list[Suggestion] = field(default_factory=list)  # each GPU kind's smallest fit
    unfit: list[tuple[str, str]] = field(default_factory=list)  # (GPU kind, reason)
    cache_size: str | None = None  # weight cache to reserve, e.g. "17Gi"
    modalities: list[str] = field(default_factory=list)  # inputs besides text
    warnings: list[str] = field(default_factory=list)
    # Which of `warnings` says the hf:// revision is not pinned: the dry run leaves it to the
    # manifest rule that decides the same thing (at the uri), so it is said once.
    pin_warning: str | None = None
    custom_code: bool = False
    # The refusal is the profile's Hugging Face token's (none, no access, rejected): pages
    # link to the profile, where the token is set.
    about_token: bool = False
    # A bucket's artifact (s3://): whether anonymous reads are refused (None: not asked), so
    # the dry run asks a Kubernetes profile for the access its cluster reads it with; and a
    # refusal that is the profile's storage credentials' (none, or no access).
    storage_private: bool | None = None
    about_storage: bool = False
    vllm_version: str | None = None
    gpu_memory_utilization: float | None = None

    @property
    def weights_on_cpu(self) -> int | None:
        """What the memory of a replica on the CPU must hold for the weights."""
        return self.cpu_weight_bytes or self.weight_bytes

    def kv_bytes(self) -> int:
        """The KV cache at the context and concurrency it was sized for (0 when not sized)."""
        return (self.kv_bytes_per_token or 0) * (self.context_tokens or 0) * self.concurrency

    def memory_text(self) -> str | None:
        """What the model needs where it is suggested to run, per GPU on GPUs (with the sum
        over them), or on the CPU against the machine's memory; None when not sized."""
        at = f"at {self.context_tokens} tokens" if self.context_tokens else ""
        if self.concurrency > 1:
            at += f" × {self.concurrency} requests at once"
        suggestion = self.suggestion
        if suggestion is not None and suggestion.accelerator == "cpu":
            if not self.cpu_memory_bytes:
                return None
            text = f"{human_bytes(self.cpu_memory_bytes)} of memory on the CPU {at}".rstrip()
            if suggestion.machine_memory_bytes:
                text += f"; the machine has {human_bytes(suggestion.machine_memory_bytes)}"
            return text
        if suggestion is not None and suggestion.needed_per_gpu_bytes:
            per_gpu = suggestion.needed_per_gpu_bytes
            text = f"{human_bytes(per_gpu)} per GPU on {suggestion.describe()} {at}".rstrip()
            if suggestion.total_gpus > 1:
                text += f", {human_bytes(per_gpu * suggestion.total_gpus)} in all"
            return text
        if self.memory_needed_bytes:
            return f"{human_bytes(self.memory_needed_bytes)} on one GPU {at}".rstrip()
        return None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["suggestion"] = self.suggestion.as_dict() if self.suggestion else None
        data["options"] = [option.as_dict() for option in self.options]
        data["unfit"] = [{"gpu_kind": kind, "reason": reason} for kind, reason in self.unfit]
        # The sizing core's words for its figures, so a terminal prints them as the pages do.
        data["weights_text"] = (
            f"{human_bytes(self.weight_bytes)} ({self.weight_dtype})" if self.weight_bytes else None
        )
        data["kv_cache_text"] = (
            f"{human_bytes(self.kv_bytes_per_token)} per token" if self.kv_bytes_per_token else None
        )
        data["memory_text"] = self.memory_text()
        return data


@dataclass(frozen=True)
class HubRequest:
    """One hf:// check: the model, the token and Hub to ask, and what to size it for."""

    uri: UriInfo
    token: str | None
    endpoint: str
    catalog: Sequence[Mapping]
    vllm_version: str
    context_tokens: int | None
    gpu_memory_utilization: float

    @property
    def repo(self) -> str:
        return self.uri.hf_repo or ""

    def read(self, filename: str, sha: str) -> dict | list | None:
        revision = sha or self.uri.hf_revision  # a mirror may not send the commit
        return hub.read_json(self.repo, filename, revision, self.token, endpoint=self.endpoint)

    def safetensors(self) -> hub_weights.SafetensorsSummary | None:
        return hub_weights.safetensors_summary(
            self.repo, self.uri.hf_revision, self.token, endpoint=self.endpoint
        )
