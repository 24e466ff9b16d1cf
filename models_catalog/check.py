"""Check model: whether the platform can serve a model, answered before anything runs from
metadata alone (the Hub's model info, config.json, safetensors headers), with the runtime,
task, memory, the machines that hold it and, when it cannot serve, why and what to do."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from models_catalog import architectures, hub
from models_catalog.architectures import Unsupported
from models_catalog.sizing import (
    MAX_GPUS,
    Demand,
    Sizing,
    Suggestion,
    Weights,
    cache_size,
    human_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    largest_kind,
    max_context,
    max_context_that_fits,
    model_shape,
    parse_bytes,
    size_on_catalog,
    weights_from_file_bytes,
    weights_from_safetensors,
)

SERVABLE = "The platform can serve this model."
DEFAULT_VLLM_VERSION = "0.13.0"

# Format -> the serving runtime that loads it (the names jobs.manifest uses).
FORMAT_RUNTIMES = {
    "vLLM": "vllm",
    "SKLearn": "sklearn",
    "XGBoost": "xgboost",
    "LightGBM": "lightgbm",
    "TensorFlow": "tensorflow",
    "PyTorch": "torchserve",
    "ONNX": "triton",
    "TensorRT": "triton",
    "Triton": "triton",
    "MLflow": "mlserver",
    "PMML": "kserve-pmmlserver",
    "Paddle": "kserve-paddleserver",
}
GPU_ONLY_FORMATS = frozenset({"TensorRT"})  # TensorRT engines run on NVIDIA GPUs only
PREDICTIVE_DEFAULT = Suggestion(accelerator="cpu", cpu="1", memory="2Gi")
STORAGE = {
    "s3": "an S3 bucket",
    "gs": "a Google Cloud Storage bucket",
    "pvc": "a PersistentVolumeClaim",
    "oci": "an OCI image",
    "azure": "Azure Blob Storage",
}
URI_FORMS = (
    "hf://<org>/<repo>[:<revision>], s3://<bucket>/<path>, gs://<bucket>/<path>, "
    "pvc://<claim>/<path>, oci://<registry>/<image> or "
    "https://<account>.blob.core.windows.net/<container>/<path>"
)
PARAKEET_ARCHITECTURE = "ParakeetForTDT"
OTHER_WEIGHT_SUFFIXES = (".onnx", ".h5", ".msgpack", ".pt", ".pth", ".ckpt", ".nemo", ".tflite")


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
    weight_source: str | None = None  # "hub" summary, safetensors "headers", or "file sizes"
    max_context_tokens: int | None = None
    context_tokens: int | None = None  # the context the memory is sized for
    concurrency: int = 1
    kv_bytes_per_token: int | None = None
    memory_needed_bytes: int | None = None  # on one GPU, over gpuMemoryUtilization
    suggestion: Suggestion | None = None
    options: list[Suggestion] = field(default_factory=list)  # each GPU kind's smallest fit
    unfit: list[tuple[str, str]] = field(default_factory=list)  # (GPU kind, reason)
    cache_size: str | None = None  # weight cache to reserve, e.g. "17Gi"
    modalities: list[str] = field(default_factory=list)  # inputs besides text
    warnings: list[str] = field(default_factory=list)
    custom_code: bool = False
    vllm_version: str | None = None
    gpu_memory_utilization: float | None = None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["suggestion"] = self.suggestion.as_dict() if self.suggestion else None
        data["options"] = [option.as_dict() for option in self.options]
        data["unfit"] = [{"gpu_kind": kind, "reason": reason} for kind, reason in self.unfit]
        return data


@dataclass(frozen=True)
class ModelUri:
    text: str
    scheme: str  # hf, s3, gs, pvc, oci, azure
    repo: str | None = None
    revision: str | None = None


class UriRejected(ValueError):
    pass


_HF = re.compile(r"([A-Za-z0-9][\w.-]{0,95})/([A-Za-z0-9][\w.-]{0,95})(?::([\w./-]{1,255}))?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_QUERY_ALLOWED = {"s3": "versionId", "gs": "generation"}


def parse_uri(uri: str) -> ModelUri:
    """The scheme (and repo and revision for hf://) of a model URI; UriRejected says why not."""
    text = uri.strip()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or not rest:
        raise UriRejected(f"{uri!r} is not a model URI")
    if "@" in rest.split("/", 1)[0]:
        raise UriRejected("the URI carries credentials; the profile holds them, never the URI")
    rest, _, query = rest.partition("?")
    if query and not (scheme in _QUERY_ALLOWED and query.startswith(_QUERY_ALLOWED[scheme] + "=")):
        raise UriRejected("the URI has a query string; only ?versionId= (s3) and ?generation= (gs)")
    if scheme == "hf":
        match = _HF.fullmatch(rest)
        if not match:
            raise UriRejected(f"{uri!r} is not hf://<org>/<repo>[:<revision>]")
        org, name, revision = match.groups()
        return ModelUri(text, "hf", f"{org}/{name}", revision)
    if scheme == "https" and rest.split("/", 1)[0].endswith(".blob.core.windows.net"):
        return ModelUri(text, "azure")
    if scheme in ("s3", "gs", "pvc", "oci") and "/" in rest.strip("/"):
        return ModelUri(text, scheme)
    raise UriRejected(f"{uri!r} is not a URI the platform reads")


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
) -> CheckResult:
    """Whether the platform can serve the model at `uri`, and on what.

    Memory is sized for `concurrency` requests of `context_tokens` each (the model's own
    maximum context when None). `format` is required for anything but hf://.
    """
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
    except UriRejected as exc:
        return _refuse(base, f"uri: {exc}.", f"Use {URI_FORMS}.")
    if concurrency < 1 or (context_tokens is not None and context_tokens < 1):
        return _refuse(
            base,
            f"Check model sizes for whole numbers of tokens and requests, at least 1 "
            f"(got context {context_tokens}, concurrency {concurrency}).",
            "Set serving.maxContextTokens and serving.maxConcurrentRequests to 1 or more.",
        )
    if format is not None and format not in FORMAT_RUNTIMES:
        return _refuse(
            base,
            f"format: {format!r} is not a model format the platform serves.",
            f"Use one of {', '.join(FORMAT_RUNTIMES)}.",
        )
    if parsed.scheme != "hf" or format not in (None, "vLLM"):
        return _check_by_format(base, parsed, format, catalog)
    endpoint = hub.endpoint_now(hf_endpoint)
    request = _Request(parsed, hf_token, endpoint, catalog, vllm_version, context_tokens, util)
    try:
        with hub.time_budget():
            return _check_hf(base, request)
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
        return _hub_refusal(base, request, exc)


def _refuse(base: CheckResult, verdict: str, next_step: str, **known) -> CheckResult:
    return replace(base, can_serve=False, verdict=verdict, next_step=next_step, **known)


# ---- anything but hf://, and predictive formats: the format answers ----


def _check_by_format(
    base: CheckResult, uri: ModelUri, format: str | None, catalog: Sequence[Mapping]
) -> CheckResult:
    where = STORAGE.get(uri.scheme, "a Hugging Face repository")
    if format is None:
        return _refuse(
            base,
            f"Check model cannot look inside {where} from here, so it cannot tell which runtime "
            "serves this model.",
            f"Set spec.source.model.format (one of {', '.join(FORMAT_RUNTIMES)}).",
        )
    unread = (
        f"Check model cannot look inside {where} from here: the files, architecture and size "
        "are not checked; the dry run and the model's first start will show them."
    )
    result = replace(base, runtime=FORMAT_RUNTIMES[format], warnings=[unread])
    if format == "vLLM":
        step = "Set resources.accelerator.gpu (model and countPerReplica) for the model's size "
        return _serve(replace(result, task="generate"), step + "yourself; Check model could not.")
    suggestion = PREDICTIVE_DEFAULT
    if format in GPU_ONLY_FORMATS:
        gpus = [kind for kind in catalog if kind.get("vendor", "nvidia") == "nvidia"]
        if not gpus:
            return _refuse(
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
    return _serve(
        result, f"Deploy it on {suggestion.describe()}; raise resources.memory if it needs more."
    )


def _serve(result: CheckResult, next_step: str | None = None) -> CheckResult:
    step = next_step or _deploy_step(result)
    return replace(result, can_serve=True, verdict=SERVABLE, next_step=step)


# ---- hf:// ----


@dataclass(frozen=True)
class _Request:
    uri: ModelUri
    token: str | None
    endpoint: str
    catalog: Sequence[Mapping]
    vllm_version: str
    context_tokens: int | None
    gpu_memory_utilization: float

    @property
    def repo(self) -> str:
        return self.uri.repo or ""

    def read(self, filename: str, sha: str) -> dict | list | None:
        revision = sha or self.uri.revision  # a mirror may not send the commit
        return hub.read_json(self.repo, filename, revision, self.token, endpoint=self.endpoint)


def _check_hf(base: CheckResult, request: _Request) -> CheckResult:
    info = hub.model_info(
        request.repo, request.uri.revision, request.token, endpoint=request.endpoint
    )
    base = replace(base, revision=info.sha or None, warnings=_pin_warnings(request, info))
    if _is_parakeet(request.repo, info.file_names):
        return _parakeet(base, request, info)
    config = request.read("config.json", info.sha)
    if not isinstance(config, dict):
        return _no_config(base, request, info)
    names = config.get("architectures") or []
    if not names:
        return _refuse(
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
        return _unsupported(base, request, found, config)
    weight_format, files = hub.weight_files(info.file_names)
    if weight_format is None:
        return _no_weights(base, request, info)
    if weight_format == "gguf":
        return _gguf_only(base, request)
    return _size(base, request, info, found, config, tokenizer_config, weight_format, files)


def _pin_warnings(request: _Request, info: hub.HubModelInfo) -> list[str]:
    revision = request.uri.revision
    if revision and _COMMIT.fullmatch(revision):
        return []
    follows = f"its {revision} branch or tag" if revision else "its main branch"
    return [
        f"No revision pinned: {request.uri.text} follows {follows}, so a restart may serve "
        f"different weights; pin it as hf://{request.repo}:{info.sha}."
    ]


def _size(
    base: CheckResult,
    request: _Request,
    info: hub.HubModelInfo,
    found: architectures.ArchInfo,
    config: dict,
    tokenizer_config: dict | None,
    weight_format: str,
    files: list[str] | None,
) -> CheckResult:
    task, encoder_config = found.task, None
    modules = request.read("modules.json", info.sha)
    if isinstance(modules, list) and any("Pooling" in str(m.get("type")) for m in modules):
        # A Sentence-Transformers pooling config makes it a pooling model.
        task = "embed" if task == "generate" else task
        encoder = request.read("sentence_bert_config.json", info.sha)
        encoder_config = encoder if isinstance(encoder, dict) else None
    weights, disk_bytes, source = _weights(request, info, config, weight_format, files)
    shape = model_shape(config)
    limit = max_context(config, tokenizer_config, encoder_config)
    result = replace(
        base,
        runtime="vllm",
        task=task,
        parameters=weights.parameters,
        weight_dtype=weights.dtype,
        weight_bytes=weights.stored_bytes,
        weight_source=source,
        max_context_tokens=limit,
        kv_bytes_per_token=kv_bytes_per_token(shape),
        cache_size=cache_size(disk_bytes) if disk_bytes else None,
        modalities=list(found.modalities),
        warnings=base.warnings + _arch_warnings(found, base.custom_code, weight_format),
    )
    wanted = request.context_tokens
    if wanted is not None and wanted > limit:
        return _refuse(
            result,
            f"serving.maxContextTokens {wanted} is above the model's own limit of {limit} tokens; "
            "the runtime would not start.",
            f"Set serving.maxContextTokens to {limit} or less.",
        )
    context = wanted or limit
    kv = kv_cache_bytes(shape, context, base.concurrency)
    demand = Demand(weights.gpu_bytes, kv, shape, request.gpu_memory_utilization)
    sizing = size_on_catalog(demand, request.catalog, nvidia_only=True)
    result = replace(
        result,
        context_tokens=context,
        memory_needed_bytes=sizing.memory_needed_bytes,
        suggestion=sizing.suggestion,
        options=sizing.options,
        unfit=sizing.unfit,
    )
    if sizing.suggestion is None:
        return _too_large(result, request, demand, sizing, context)
    return _serve(result)


def _weights(
    request: _Request,
    info: hub.HubModelInfo,
    config: dict,
    weight_format: str,
    files: list[str] | None,
) -> tuple[Weights, int | None, str]:
    if weight_format == "safetensors":
        summary = hub.safetensors_summary(
            request.repo, request.uri.revision, request.token, endpoint=request.endpoint
        )
        if summary is not None:
            weights = weights_from_safetensors(summary.parameters_by_dtype, config)
            return weights, summary.file_bytes, summary.source
    size = info.size_of(files or [])
    if not size:
        raise hub.BadFile(
            f"the Hub gave no sizes for the weights of {request.repo}",
            endpoint=request.endpoint,
            repo=request.repo,
        )
    return weights_from_file_bytes(size, config), size, "file sizes"


def _arch_warnings(
    found: architectures.ArchInfo, custom_code: bool, weight_format: str
) -> list[str]:
    warnings = []
    if found.via == "transformers":
        warnings.append(
            f"vLLM {found.vllm_version} serves {found.name} through its Transformers backend, "
            "not a native implementation: expect lower throughput, and some features may be "
            "missing."
        )
    if custom_code:
        warnings.append(
            f"The repository ships custom code (auto_map in its config); vLLM uses its own "
            f"implementation of {found.name}, so that code is not run."
        )
    if weight_format == "bin":
        warnings.append(
            "The weights are PyTorch .bin (pickle) files: vLLM loads them, but safetensors loads "
            "faster and cannot carry code."
        )
    if found.data_version != found.vllm_version:
        warnings.append(
            f"No architecture list for vLLM {found.vllm_version} is on file; answered with "
            f"vLLM {found.data_version}'s. Regenerate it with manage.py vllm_architectures."
        )
    return warnings


def _deploy_step(result: CheckResult) -> str:
    suggestion = result.suggestion
    assert suggestion is not None
    step = f"Deploy it on {suggestion.describe()}"
    if result.cache_size:
        step += f"; reserve a {result.cache_size} weight cache if caching is on"
    return step + "."


def _too_large(
    result: CheckResult, request: _Request, demand: Demand, sizing: Sizing, context: int
) -> CheckResult:
    gpus = [kind for kind in request.catalog if kind.get("vendor", "nvidia") == "nvidia"]
    biggest = largest_kind(gpus)
    if biggest is None:
        return _refuse(
            result,
            "The profile's machine catalog has no NVIDIA GPU kinds to run it on.",
            "Add GPU kinds to the profile's machine catalog.",
        )
    fits = max_context_that_fits(demand, gpus, result.concurrency, context - 1)
    at_once = f" with {result.concurrency} requests at once" if result.concurrency > 1 else ""
    if fits:
        return _refuse(
            result,
            f"At {context:,} tokens of context{at_once}, {request.repo} needs more memory "
            f"than {MAX_GPUS} {biggest['name']} GPUs hold; it fits with at most {fits:,} tokens.",
            f"Set serving.maxContextTokens to {fits} or less"
            + (", or lower serving.maxConcurrentRequests." if result.concurrency > 1 else "."),
        )
    why = dict(sizing.unfit)[biggest["name"]]
    return _refuse(
        result,
        f"{request.repo} is too large for {MAX_GPUS} GPUs of the largest kind in the catalog "
        f"({biggest['name']}): its weights alone are {human_bytes(demand.weight_bytes)}, and it "
        f"{why}.",
        "Pick a smaller or quantised version of the model (an FP8, AWQ or GPTQ repository), or "
        "add a machine kind with more GPU memory to the profile's catalog.",
    )


# ---- refusals ----


def _unsupported(
    base: CheckResult, request: _Request, found: Unsupported, config: dict
) -> CheckResult:
    if base.custom_code and not (found.last_version or found.plugin or found.added_in):
        classes = ", ".join(sorted(set((config.get("auto_map") or {}).values()))) or "its own code"
        return _refuse(
            base,
            f"{request.repo} needs custom code from its repository ({classes}, through auto_map), "
            f"and vLLM {request.vllm_version} has no built-in implementation of {found.name}; "
            "the platform does not run repository code.",
            "Pick a version of the model with a supported architecture (many are republished "
            "in a transformers-native form), or serve it with a runtime image of your own.",
        )
    return _refuse(base, f"{found.reason}.", f"{found.fix}.")


def _no_weights(base: CheckResult, request: _Request, info: hub.HubModelInfo) -> CheckResult:
    found = [name for name in info.file_names if name.endswith(OTHER_WEIGHT_SUFFIXES)]
    seen = f" (it has {', '.join(found[:4])})" if found else ""
    return _refuse(
        base,
        f"{request.repo} has no weights vLLM reads: no .safetensors, PyTorch .bin or GGUF "
        f"files{seen}.",
        "Pick the repository that holds the model's safetensors weights, or convert the "
        "weights to safetensors and upload them.",
    )


def _gguf_only(base: CheckResult, request: _Request) -> CheckResult:
    return _refuse(
        base,
        f"{request.repo} holds only GGUF files; vLLM loads a single GGUF file with the original "
        "model's tokenizer, which a repository URI cannot point at.",
        "Point the URI at the original model's repository (safetensors weights) instead.",
    )


def _no_config(base: CheckResult, request: _Request, info: hub.HubModelInfo) -> CheckResult:
    names = info.file_names
    if any(name.endswith(".gguf") for name in names):
        return _gguf_only(base, request)
    if any(name.endswith(".nemo") for name in names):
        return _refuse(
            base,
            f"{request.repo} is a NeMo checkpoint; the platform serves NeMo models only for "
            "Parakeet speech recognition.",
            "Pick a Parakeet model (e.g. hf://nvidia/parakeet-tdt-0.6b-v3) or a transformers "
            "version of this model.",
        )
    return _refuse(
        base,
        f"{request.repo} has no config.json, so neither Check model nor vLLM can tell its "
        "architecture.",
        "Pick a transformers model repository (one with config.json and safetensors weights).",
    )


def _hub_refusal(base: CheckResult, request: _Request, exc: hub.HubError) -> CheckResult:
    repo, page = request.repo, f"{request.endpoint}/{request.repo}"
    if isinstance(exc, hub.GatedRepo) and not exc.has_token:
        return _refuse(
            base,
            f"{repo} is gated, and the profile has no Hugging Face token to read it with.",
            f"Accept the model's terms at {page}, then add a Hugging Face token of that account "
            "to the profile.",
        )
    if isinstance(exc, hub.AccessDenied):
        return _refuse(
            base,
            f"The profile's Hugging Face token has no access to the gated model {repo}.",
            f"Request access at {page} with the account that owns the token (approval can take "
            "a while), or use another account's token.",
        )
    if isinstance(exc, hub.InvalidToken):
        return _refuse(
            base,
            "The Hugging Face Hub rejected the profile's token (wrong, expired or revoked).",
            "Replace the Hugging Face token on the profile with a valid read token.",
        )
    if isinstance(exc, hub.RevisionNotFound):
        return _refuse(
            base,
            f"{repo} has no revision {exc.revision!r} (no branch, tag or commit of that name).",
            _revision_fix(request),
        )
    if isinstance(exc, hub.RepoNotFound):
        return _refuse(
            base,
            f"There is no model {repo} on the Hugging Face Hub at {request.endpoint}, or it is "
            "private and the profile's token cannot see it.",
            "Check the repository id (org/name, as on its Hub page), or add a token that can "
            "read it to the profile.",
        )
    return _refuse(
        base,
        f"Check model could not read {repo}: {exc}.",
        "Fix the repository, or pick another model.",
    )


def _revision_fix(request: _Request) -> str:
    try:
        sha = hub.model_info(request.repo, None, request.token, endpoint=request.endpoint).sha
    except hub.HubError:
        return f"Use a branch, tag or commit of {request.repo}, or leave the revision out."
    return f"Use a branch, tag or commit, e.g. its current main: hf://{request.repo}:{sha}."


# ---- Parakeet ----


def _is_parakeet(repo: str, names: Sequence[str]) -> bool:
    return "parakeet" in repo.lower() and any(name.endswith(".nemo") for name in names)


def _parakeet(base: CheckResult, request: _Request, info: hub.HubModelInfo) -> CheckResult:
    """NeMo Parakeet speech recognition: the parakeet runtime, sized from the .nemo archive
    (float32 weights, so parameters are its size over 4)."""
    archives = [name for name in info.file_names if name.endswith(".nemo")]
    size = info.size_of(archives) or 0
    weights = weights_from_file_bytes(size, {"torch_dtype": "float32"})
    demand = Demand(size, 0, None, request.gpu_memory_utilization)
    sizing = size_on_catalog(demand, request.catalog, nvidia_only=True)
    result = replace(
        base,
        runtime="parakeet",
        task="transcribe",
        architecture=PARAKEET_ARCHITECTURE,
        parameters=weights.parameters,
        weight_dtype="float32",
        weight_bytes=size,
        weight_source="file sizes",
        memory_needed_bytes=sizing.memory_needed_bytes,
        suggestion=sizing.suggestion,
        options=sizing.options,
        unfit=sizing.unfit,
        cache_size=cache_size(size),
        modalities=["audio"],
    )
    if sizing.suggestion is None:
        return _refuse(
            result,
            "No GPU kind in the profile's catalog holds this speech model.",
            "Add a GPU kind to the profile's machine catalog.",
        )
    return _serve(result)
