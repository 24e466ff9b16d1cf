"""Check model: whether the platform can serve a model, answered before anything runs from
metadata alone (the Hub's model info, config.json, safetensors headers), with the runtime,
task, memory, the machines that hold it and, when it cannot serve, why and what to do.

Here: the steps to a verdict. The question and the answer are check_types.py's, the figures
of a model it can serve check_sizing.py's, the reasons it cannot refusals.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import jobs.backends.local.runtimes as runtimes
import jobs.backends.local.vllm_cpu as vc
from jobs.machine_catalog import gpu_kinds
from jobs.manifest import FORMAT_ENGINE, UriInfo, parse_uri
from jobs.manifest.model_defaults import cpu_replica_bytes
from jobs.manifest.uri import UriError
from jobs.storage_access import ANONYMOUS, CREDENTIALS_FIELD, Credentials
from models_catalog import architectures, hub, hub_weights
from models_catalog import folders as model_folder
from models_catalog.architectures import Unsupported
from models_catalog.azure_reads import AzureReader
from models_catalog.bucket_check import BucketRequest
from models_catalog.check_sizing import servable, size_parakeet, size_vllm
from models_catalog.check_types import CheckResult, HubRequest
from models_catalog.gcs_reads import GCSReader
from models_catalog.hub_facts import RepoFacts, repo_facts
from models_catalog.refusals import (
    gguf_only,
    hub_refusal,
    no_config,
    no_weights,
    refuse,
    unsupported,
)
from models_catalog.s3_reads import S3Reader
from models_catalog.sizing import (
    Demand,
    Suggestion,
    parse_bytes,
    size_on_catalog,
    weight_bytes_in,
)
from models_catalog.storage_reads import (
    BucketReader,
    StorageDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
)

DEFAULT_VLLM_VERSION = "0.13.0"

GPU_ONLY_FORMATS = frozenset({"TensorRT"})  # TensorRT engines run on NVIDIA GPUs only
PREDICTIVE_DEFAULT = Suggestion(accelerator="cpu", cpu="1", memory="2Gi")
STORAGE = {
    "s3": "an S3 bucket",
    "gs": "a Google Cloud Storage bucket",
    "pvc": "a PersistentVolumeClaim",
    "oci": "an OCI image",
    "https": "Azure Blob Storage",  # the only https:// the platform reads
}
CTRANSLATE2_WHISPER = "Whisper (CTranslate2)"


def check_model(
    uri: str,
    *,
    catalog: Sequence[Mapping],
    vllm_version: str = DEFAULT_VLLM_VERSION,
    hf_token: str | None = None,
    context_tokens: int | None = None,
    concurrency: int = 1,
    format: str | None = None,  # the manifest's name for it
    gpu_memory_utilization: float | None = None,
    hf_endpoint: str | None = None,
    on_this_machine: bool = False,
    free_memory: int | None = None,
    wants_gpu: bool | None = None,
    gpu_profiles: Mapping[str, Sequence[Mapping]] | None = None,
    dtype: str | None = None,
    storage: Credentials = ANONYMOUS,
) -> CheckResult:
    """Whether the platform can serve the model at `uri`, and on what.

    Memory is sized for `concurrency` requests of `context_tokens` each (the model's own
    maximum context when None). `format` is required for anything but hf://.
    `on_this_machine`: the profile is the local one, so an hf:// model is also said which
    server runs it here; `free_memory` (bytes) is this machine's, which a model a CPU runtime
    serves must fit (file:// folders are always on this machine). `wants_gpu` is whether the
    manifest's replica asks for a GPU (None: asked without a manifest); `gpu_profiles` maps the
    organisation's Kubernetes profiles with GPUs to their machine catalogs, so that a model no
    CPU runtime serves is told which of them would; `dtype` is the manifest's engine.dtype,
    which decides the memory vLLM's CPU build holds the weights in. `storage`: what an s3://
    folder is read with (the profile's storage credentials; unsigned requests by default).
    """
    here_too = ThisMachine(free_memory, wants_gpu, gpu_profiles or {}, dtype)
    util = gpu_memory_utilization or architectures.default_gpu_memory_utilization(vllm_version)
    base = CheckResult(
        uri=uri,
        can_serve=False,
        verdict="",
        next_step="",
        concurrency=concurrency,
        vllm_version=vllm_version,
        gpu_memory_utilization=util,
    )
    try:
        parsed = parse_uri(uri)
    except UriError as exc:
        return refuse(base, f"uri: {exc.reason}.", exc.fix)
    if concurrency < 1 or (context_tokens is not None and context_tokens < 1):
        return refuse(
            base,
            f"Check model sizes for whole numbers of tokens and requests, at least 1 "
            f"(got context {context_tokens}, concurrency {concurrency}).",
            "Set serving.maxContextTokens and serving.maxConcurrentRequests to 1 or more.",
        )
    if format is not None and format not in FORMAT_ENGINE:
        return refuse(
            base,
            f"format: {format!r} is not a model format the platform serves.",
            f"Use one of {', '.join(FORMAT_ENGINE)}.",
        )
    if parsed.scheme == "file" and format in (None, "vLLM"):
        request = _folder_request(parsed, catalog, vllm_version, context_tokens, util)
        if isinstance(request, str):
            return refuse(base, f"uri: {request}", "Give a folder under the models folder.")
        try:
            return _check_folder(base, request, here_too)
        except model_folder.FolderRefused as exc:  # a file of the folder no runtime is given
            return refuse(base, str(exc), "Fix or replace that file of the folder.")
    if parsed.scheme in BUCKET_READERS and format == "vLLM":
        request = BucketRequest(parsed, None, "", catalog, vllm_version, context_tokens, util)
        return _check_bucket(base, request, BUCKET_READERS[parsed.scheme](storage))
    if parsed.scheme != "hf" or format not in (None, "vLLM"):
        return _check_by_format(base, parsed, format, catalog)
    endpoint = hub.endpoint_now(hf_endpoint)
    request = HubRequest(parsed, hf_token, endpoint, catalog, vllm_version, context_tokens, util)
    try:
        with hub.time_budget():
            here = None
            if on_this_machine:  # the same reads as below (cached): files and config.json
                here = repo_facts(request.repo, parsed.hf_revision, hf_token, endpoint=endpoint)
            result = _check_hf(base, request, here)
            if here is not None and result.can_serve:
                result = _on_this_machine(result, here.facts, here_too)
            return result
    except hub.HubUnavailable as exc:
        return replace(
            base,
            inconclusive=True,
            verdict=f"Could not reach the Hugging Face Hub at {endpoint}: {exc}; try again, "
            "or check HF_ENDPOINT",
            next_step="Check model again in a moment; if it keeps failing, check that HF_ENDPOINT "
            "points at a reachable Hub.",
        )
    except hub.HubError as exc:
        return hub_refusal(base, request, exc)


# ---- anything but hf://, and predictive formats: the format answers ----


def _check_by_format(
    base: CheckResult, uri: UriInfo, format: str | None, catalog: Sequence[Mapping]
) -> CheckResult:
    where = STORAGE.get(uri.scheme, "a Hugging Face repository")
    if format is None:
        return refuse(
            base,
            f"Check model cannot look inside {where} from here, so it cannot tell which runtime "
            "serves this model.",
            f"Set spec.source.model.format (one of {', '.join(FORMAT_ENGINE)}).",
        )
    unread = (
        f"Check model cannot look inside {where} from here: the files, architecture and size "
        "are not checked; the dry run and the model's first start will show them."
    )
    result = replace(base, runtime=FORMAT_ENGINE[format], warnings=[unread])
    if format == "vLLM":
        step = "Set resources.accelerator.gpu (model and countPerReplica) for the model's size "
        return servable(replace(result, task="generate"), step + "yourself; Check model could not.")
    suggestion = PREDICTIVE_DEFAULT
    if format in GPU_ONLY_FORMATS:
        gpus = [kind for kind in gpu_kinds(catalog) if kind.get("vendor", "nvidia") == "nvidia"]
        if not gpus:
            return refuse(
                result,
                f"{format} models run on NVIDIA GPUs, and the catalog has none.",
                "Add GPU kinds to the profile's machine catalog.",
            )
        smallest = min(gpus, key=lambda kind: parse_bytes(kind["gpuMemory"]))
        suggestion = Suggestion(
            accelerator="gpu",
            gpu_kind=smallest["name"],
            gpus_per_replica=1,
            gpu_memory_bytes=parse_bytes(smallest["gpuMemory"]),
            node_labels=dict(smallest.get("nodeLabels") or {}),
        )
    result = replace(result, task="predict", suggestion=suggestion, options=[suggestion])
    return servable(
        result, f"Deploy it on {suggestion.describe()}; raise resources.memory if it needs more."
    )


# ---- a model folder in a bucket: S3, Google Cloud Storage ----

# The reader of each scheme, made with the profile's credentials for one check.
BUCKET_READERS = {"s3": S3Reader, "gs": GCSReader, "https": AzureReader}
# Where the operator points the console at each storage's endpoint.
ENDPOINT_SETTING = {
    "s3": "AWS_ENDPOINT_URL_S3",
    "gs": "STORAGE_EMULATOR_HOST",
    "https": "SERVEDECK_AZURE_BLOB_ENDPOINT",
}
# What pins one object of each, when a folder's uri names one.
VERSION_KEY = {"s3": "versionId", "gs": "generation", "https": "version"}


def _check_bucket(base: CheckResult, request: BucketRequest, reader: BucketReader) -> CheckResult:
    """The folder's files read as the Hub's are, with the profile's credentials; whether
    anyone could read it without them is asked once (one byte), for the cluster's access."""
    uri = request.uri
    storage = reader.credentials
    bucket, key = reader.locate(uri)
    where = f"{uri.scheme}://{bucket}/{key.rstrip('/')}/"
    try:
        folder = reader.folder(bucket, key)
        request = replace(request, reader=reader, folder=folder)
        result = _check_files(replace(base, revision=None), request, request.info())
        probe = "config.json" if folder.has("config.json") else folder.names[0]
        private = False if storage.anonymous else not reader.readable_anonymously(folder, probe)
        result = replace(result, storage_private=private)
        if uri.version:
            result.warnings = [
                *result.warnings,
                f"{VERSION_KEY[uri.scheme]} pins one object, and {where} is a folder of "
                f"{len(folder.files)}: its files were read as they are now.",
            ]
        return result
    except StorageDenied as exc:
        has = "no storage credentials" if exc.anonymous else "storage credentials that cannot"
        return refuse(
            base,
            f"{uri.text} cannot be read: {exc}. It is private, and the profile has {has} read it.",
            f"Set the profile's {CREDENTIALS_FIELD} to credentials that may read the bucket "
            "(env/<PREFIX> of variables the operator allowed, or machine), then Check model again.",
            about_storage=True,
            storage_private=True,
        )
    except StorageUnavailable as exc:
        return replace(
            base,
            inconclusive=True,
            verdict=f"Could not read {where}: {exc}; try again",
            next_step="Check model again in a moment; if it keeps failing, check the bucket's "
            f"endpoint ({ENDPOINT_SETTING[uri.scheme]} on the console's host) and this "
            "machine's network.",
        )
    except StorageNotFound as exc:
        return refuse(
            base,
            f"{uri.text} cannot be read: {exc}.",
            "Check the bucket and the folder's path (the folder that holds config.json).",
        )
    except (StorageError, hub.HubError) as exc:
        return refuse(base, f"{uri.text}: {exc}.", "Fix the folder's files, or use another model.")


# ---- a model's files: a folder on this machine, or an hf:// repository ----


@dataclass(frozen=True)
class FolderRequest(HubRequest):
    """One file:// check: the same questions, answered from the folder on this machine."""

    folder: Path = Path()

    @property
    def repo(self) -> str:
        return str(self.folder)

    def read(self, filename: str, sha: str) -> dict | list | None:
        return model_folder.read_json(self.folder / filename)

    def safetensors(self) -> hub_weights.SafetensorsSummary | None:
        counts = model_folder.safetensors_parameters(self.folder)
        files = sorted(p.name for p in self.folder.glob("*.safetensors") if p.is_file())
        if not counts:
            return None
        size = sum((self.folder / name).stat().st_size for name in files)
        return hub_weights.SafetensorsSummary(counts, size, size, tuple(files), "headers")


def _folder_request(
    uri: UriInfo, catalog, vllm_version: str, context_tokens: int | None, util: float
) -> FolderRequest | str:
    """The check of a model folder under the configured models folder, or why it cannot be
    read (a path outside it, or no folder)."""
    try:
        folder = model_folder.resolve_folder(
            uri.file_path or "", model_folder.configured_models_dir()
        )
    except model_folder.FolderRefused as exc:
        return str(exc)
    return FolderRequest(uri, None, "", catalog, vllm_version, context_tokens, util, folder)


def _check_folder(base: CheckResult, request: FolderRequest, here: ThisMachine) -> CheckResult:
    names = model_folder.file_names(request.folder)
    files = tuple(hub.HubFile(n, (request.folder / n).stat().st_size) for n in names)
    info = hub.HubModelInfo(
        str(request.folder), "", None, False, None, None, (), None, files, None, None
    )
    base = replace(base, revision=None)
    if runtimes.weights_layout(names) == runtimes.CTRANSLATE2:
        # faster-whisper's checkpoints: no transformers config to size from; a tiny or base
        # Whisper runs in well under the default CPU memory.
        facts = model_folder.folder_facts(request.folder)
        served = _ctranslate2(base, facts, sum(f.size or 0 for f in files))
        return _on_this_machine(served, facts, here)
    result = _check_files(base, request, info)
    if not result.can_serve:
        return result
    return _on_this_machine(result, model_folder.folder_facts(request.folder), here)


def _ctranslate2(base: CheckResult, facts: runtimes.ModelFacts, size: int) -> CheckResult:
    """A CTranslate2 Whisper checkpoint (faster-whisper's): no transformers config to size
    from, so its files stand for its weights; a tiny or base Whisper runs in well under the
    default CPU memory."""
    result = replace(
        base,
        task=facts.task,
        runtime=runtimes.FASTER_WHISPER.name,
        # Named, so the manifest's fill takes what was found (the commit an hf:// uri is
        # pinned to) as for any other model.
        architecture=facts.architecture or CTRANSLATE2_WHISPER,
        weight_bytes=size,
        weight_source="file sizes",
        cpu_memory_bytes=cpu_replica_bytes(size),
    )
    return servable(result, "Deploy it on the local profile.")


@dataclass(frozen=True)
class ThisMachine:
    """What Check model on the local profile weighs besides the model (see check_model)."""

    free_memory: int | None = None
    wants_gpu: bool | None = None
    gpu_profiles: Mapping[str, Sequence[Mapping]] = field(default_factory=dict)
    dtype: str | None = None  # the manifest's engine.dtype (None: not given, or no manifest)


def _on_this_machine(
    result: CheckResult, facts: runtimes.ModelFacts, here: ThisMachine
) -> CheckResult:
    """Which server runs the model here (a folder on this machine, or an hf:// model on the
    local profile), as runtimes.choose_runtime decides for the local backend too; a refusal
    when none does, or when a CPU runtime's replica would not fit this machine's free memory."""
    folder = runtimes.configured_runtimes_dir()
    vllm = runtimes.vllm_installed()
    wants_gpu = here.wants_gpu
    if wants_gpu is None:
        # No manifest (Check model's page, the API, the wizard before Compute): the replica
        # the wizard would deploy, on the GPU suggested here when vLLM is here to use it.
        suggested = result.suggestion
        wants_gpu = vllm and suggested is not None and suggested.accelerator == "gpu"
    choice = runtimes.choose_runtime(
        replace(facts, wants_gpu=wants_gpu),
        vllm_installed=vllm,
        installed=runtimes.installed_runtimes(folder),
        runtimes_dir=folder,
        gpu_profiles=profiles_that_hold(result, here.gpu_profiles),
        vllm_cpu=architectures.vllm_cpu_here(folder),
    )
    if isinstance(choice, runtimes.Refusal):
        return refuse(result, choice.message, choice.install or "See above.")
    if choice.runtime == runtimes.VLLM_CPU.name:
        result = _held_by_vllm_cpu(result, here.dtype)
    said = f"On this machine it runs on {choice.runtime}: {choice.why}"
    if choice.cpu is not None and result.uri.startswith("hf://"):
        said += (
            f" The replica downloads it into {runtimes.configured_downloads_dir()} first "
            "(only the configs, tokenizer and one copy of the weights)."
        )
    result = replace(result, runtime=choice.runtime, warnings=[*result.warnings, said])
    needed = result.cpu_memory_bytes
    if choice.cpu is not None and here.free_memory is not None and needed:
        too_big = runtimes.memory_refusal(needed, here.free_memory, result.uri)
        if too_big is not None:
            return refuse(result, *too_big)
    return result


def _held_by_vllm_cpu(result: CheckResult, dtype: str | None) -> CheckResult:
    """The CPU memory of a model vLLM's CPU build serves here, sized for the dtype it serves in
    (engine.dtype `dtype` on this CPU: `auto` is float32 without bfloat16 instructions)."""
    served = vc.served_dtype(dtype, vc.cpu_flags())
    held = weight_bytes_in(result.parameters, result.weight_dtype, served)
    if held is None or held == result.weight_bytes:
        return result
    memory = cpu_replica_bytes(held, result.kv_bytes())
    return replace(result, cpu_weight_bytes=held, cpu_memory_bytes=memory)


def profiles_that_hold(
    result: CheckResult, gpu_profiles: Mapping[str, Sequence[Mapping]]
) -> list[str]:
    """The profiles (of `gpu_profiles`, name -> machine catalog) with an NVIDIA GPU kind that
    holds the model as Check model sized it: its weights and the KV cache it was sized for."""
    kv = result.kv_bytes()
    util = result.gpu_memory_utilization or architectures.default_gpu_memory_utilization(
        result.vllm_version or DEFAULT_VLLM_VERSION
    )
    demand = Demand(result.weight_bytes or 0, kv, None, util)
    return sorted(
        name
        for name, catalog in gpu_profiles.items()
        if size_on_catalog(demand, catalog, nvidia_only=True).options
    )


def _check_hf(base: CheckResult, request: HubRequest, here: RepoFacts | None = None) -> CheckResult:
    """`here`: the repository as the local profile's CPU runtimes see it (None elsewhere)."""
    info = hub.model_info(
        request.repo, request.uri.hf_revision, request.token, endpoint=request.endpoint
    )
    pins = _pin_warnings(request, info)
    base = replace(
        base, revision=info.sha or None, warnings=pins, pin_warning=pins[0] if pins else None
    )
    if here is not None and here.facts.layout == runtimes.CTRANSLATE2:
        return _ctranslate2(base, here.facts, here.download_bytes)
    return _check_files(base, request, info)


def _check_files(base: CheckResult, request: HubRequest, info: hub.HubModelInfo) -> CheckResult:
    """The check of a model's files, whether on the Hub or in a folder (`request` reads)."""
    if _is_parakeet(request.repo, info.file_names):
        return size_parakeet(base, request, info)
    config = request.read("config.json", info.sha)
    if not isinstance(config, dict):
        return no_config(base, request, info)
    names = config.get("architectures") or []
    if not names:
        return refuse(
            base,
            f"config.json of {request.repo} names no architecture, so no runtime can load it.",
            "Pick a repository whose config.json lists its architecture (a transformers model).",
        )
    arch = names[0]
    tokenizer_config = request.read("tokenizer_config.json", info.sha)
    tokenizer_config = tokenizer_config if isinstance(tokenizer_config, dict) else None
    custom_code = bool(config.get("auto_map") or (tokenizer_config or {}).get("auto_map"))
    base = replace(base, architecture=arch, custom_code=custom_code)
    found = architectures.lookup(arch, request.vllm_version)
    if isinstance(found, Unsupported):
        return unsupported(base, request, found, config)
    weight_format, files = hub_weights.weight_files(info.file_names)
    if weight_format is None:
        return no_weights(base, request, info)
    if weight_format == "gguf":
        return gguf_only(base, request)
    return size_vllm(base, request, info, found, config, tokenizer_config, weight_format, files)


def _pin_warnings(request: HubRequest, info: hub.HubModelInfo) -> list[str]:
    if request.uri.pinned:
        return []
    revision = request.uri.hf_revision
    follows = f"its {revision} branch or tag" if revision else "its main branch"
    return [
        f"No revision pinned: {request.uri.text} follows {follows}, so a restart may serve "
        f"different weights; pin it as hf://{request.repo}:{info.sha}."
    ]


def _is_parakeet(repo: str, names: Sequence[str]) -> bool:
    return "parakeet" in repo.lower() and any(name.endswith(".nemo") for name in names)
