"""What each step's form edits in the manifest, and where the dry run's problems show (pure).

A form does no validation of its own: an input maps to a manifest path, an empty input
removes the field (its default applies), and anything typed is written as typed so the
manifest rules can say what is wrong with it, at its path, beside the input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.manifest import API_VERSION, KIND, ModelDefaults, Problem, format_bytes
from jobs.wizard.paths import MODEL, get, put, remove, under
from jobs.wizard.steps import URI

GPU = f"{MODEL}.resources.accelerator.gpu"
SIZING_GROUPS = (f"{MODEL}.resources", f"{MODEL}.cache", f"{MODEL}.serving", f"{MODEL}.engine")
CPU_KIND = "cpu"
METRICS = ("cpu", "requestsWaiting")
_WHOLE = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)$")
_HUB_URL = re.compile(r"^(?:https?://(?:www\.)?huggingface\.co/|hf://)", re.IGNORECASE)


@dataclass(frozen=True)
class Field:
    """One input of a step: its form name, the manifest path it edits, how text becomes data."""

    name: str
    path: str
    kind: str = "text"  # text | int | number | lines


MODEL_FIELDS = (
    Field("name", "spec.name"),
    Field("profile", "spec.profileName"),
    Field("uri", URI),
    Field("format", f"{MODEL}.format"),
)
COMPUTE_FIELDS = (
    Field("gpu_kind", f"{GPU}.model"),
    Field("gpus", f"{GPU}.countPerReplica", "int"),
    Field("capacity", f"{GPU}.capacityType"),
    Field("nodes", f"{MODEL}.resources.nodesPerReplica", "int"),
    Field("cpu", f"{MODEL}.resources.cpu"),
    Field("memory", f"{MODEL}.resources.memory"),
    Field("context", f"{MODEL}.serving.maxContextTokens", "int"),
    Field("concurrency", f"{MODEL}.serving.maxConcurrentRequests", "int"),
    Field("min_replicas", f"{MODEL}.scaling.minReplicas", "int"),
    Field("max_replicas", f"{MODEL}.scaling.maxReplicas", "int"),
    Field("scale_to_zero_after", f"{MODEL}.scaling.scaleToZeroAfter"),
    Field("metric", f"{MODEL}.scaling.metric"),
    Field("queue", f"{MODEL}.queue.name"),
    Field("cache_enabled", f"{MODEL}.cache.enabled"),
    Field("cache_size", f"{MODEL}.cache.size"),
    Field("cache_node_group", f"{MODEL}.cache.nodeGroup"),
    Field("dtype", f"{MODEL}.engine.dtype"),
    Field("quantization", f"{MODEL}.engine.quantization"),
    Field("reasoning_parser", f"{MODEL}.engine.reasoningParser"),
    Field("tool_call_parser", f"{MODEL}.engine.toolCallParser"),
    Field("gpu_memory_utilization", f"{MODEL}.engine.gpuMemoryUtilization", "number"),
    Field("extra_args", f"{MODEL}.engine.extraArgs", "lines"),
    Field("kv_cache", f"{MODEL}.serving.kvCacheSize"),
)
# Written by the simple loop; the rest of COMPUTE_FIELDS has its own handling below.
COMPUTE_PLAIN = tuple(
    f
    for f in COMPUTE_FIELDS
    if f.name not in {"gpu_kind", "gpus", "capacity", "metric"} and not f.name.startswith("cache")
)
ACCESS_FIELDS = (
    Field("exposure", "spec.access.exposure"),
    Field("domain", "spec.access.domain"),
    Field("access_policy", "spec.access.accessPolicy"),
)
MEDIA_FIELDS = (
    Field("max_images", f"{MODEL}.serving.multimodal.maxImagesPerPrompt", "int"),
    Field("max_videos", f"{MODEL}.serving.multimodal.maxVideosPerPrompt", "int"),
    Field("max_audio", f"{MODEL}.serving.multimodal.maxAudioClipsPerPrompt", "int"),
)
MEDIA_MODALITY = {"max_images": "image", "max_videos": "video", "max_audio": "audio"}
API_FIELDS = (Field("api_format", f"{MODEL}.serving.apiFormat"), *MEDIA_FIELDS)
STEP_FIELDS = {
    "model": MODEL_FIELDS,
    "compute": COMPUTE_FIELDS,
    "access": ACCESS_FIELDS,
    "api": API_FIELDS,
}
# Each input as its label names it: problems and notices beside a field speak in these words.
LABELS = {
    "name": "Name",
    "profile": "Profile",
    "uri": "The model",
    "repo": "Hugging Face model",
    "revision": "Revision",
    "storage_uri": "Model URI",
    "source": "Where the model comes from",
    "format": "Format",
    "gpu_kind": "GPU kind",
    "gpus": "GPUs per replica",
    "capacity": "Capacity type",
    "nodes": "Nodes per replica",
    "cpu": "CPU",
    "memory": "Memory",
    "context": "Context window",
    "concurrency": "Requests at once",
    "min_replicas": "Min replicas",
    "max_replicas": "Max replicas",
    "scale_to_zero_after": "Sleep after",
    "metric": "Scaling signal",
    "metric_target": "Scaling target",
    "queue": "Queue",
    "cache_enabled": "Model cache",
    "cache_shown": "Model cache",
    "cache_size": "Cache size",
    "cache_node_group": "Node group",
    "dtype": "Data type",
    "quantization": "Quantisation",
    "reasoning_parser": "Reasoning parser",
    "tool_call_parser": "Tool call parser",
    "gpu_memory_utilization": "GPU memory share",
    "extra_args": "Extra engine arguments",
    "kv_cache": "KV cache size",
    "exposure": "Who may call it",
    "domain": "Domain",
    "access_policy": "Access policy",
    "api_format": "API format",
    "max_images": "Images per request",
    "max_videos": "Videos per request",
    "max_audio": "Audio clips per request",
}
# The inputs each step's form sends, and the ones that are saved together: one changed input
# of a group writes the whole group (a GPU kind with its count, a metric with its target).
STEP_INPUTS = {
    "model": ("name", "profile", "source", "repo", "revision", "storage_uri", "format"),
    "compute": (*(f.name for f in COMPUTE_FIELDS), "metric_target", "cache_shown"),
    "access": ("exposure", "domain", "access_policy"),
    "api": ("api_format", *(f.name for f in MEDIA_FIELDS)),
}
INPUT_GROUPS = (
    ("source", "repo", "revision", "storage_uri"),
    ("gpu_kind", "gpus", "capacity", "nodes"),
    ("metric", "metric_target"),
    ("cache_shown", "cache_enabled", "cache_size", "cache_node_group"),
    ("exposure", "domain", "access_policy"),
)


# ---- text in, data out ----


def coerce(kind: str, raw: Any) -> Any:
    """Form text as manifest data; "" is None (the default). Text that is not the kind asked
    stays text, so the manifest rules name it."""
    if raw is None:
        return None
    if kind == "lines":
        lines = [line.strip() for line in str(raw).splitlines()]
        return [line for line in lines if line] or None
    text = str(raw).strip()
    if not text:
        return None
    if kind == "int" and _WHOLE.match(text):
        return int(text)
    if kind == "number" and _DECIMAL.match(text):
        return float(text) if "." in text else int(text)
    return text


def shown(value: Any) -> str:
    """Manifest data as form text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value)


def values(doc: Mapping, fields: Iterable[Field]) -> dict[str, str]:
    """What each input shows for the draft: only what the draft itself says (defaults are
    shown beside the inputs, from the filled-in manifest)."""
    return {f.name: shown(get(doc, f.path)) for f in fields}


def apply_plain(doc: dict, fields: Iterable[Field], data: Mapping) -> None:
    """Write the inputs the form sent; an input the form did not send is left as it was."""
    for f in fields:
        if f.name in data:
            put(doc, f.path, coerce(f.kind, data.get(f.name)))


def skeleton(doc: dict) -> dict:
    """The parts of an Application document no step asks about."""
    doc.setdefault("apiVersion", API_VERSION)
    doc.setdefault("kind", KIND)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        spec = doc["spec"] = {}
    source = spec.get("source")
    if not isinstance(source, dict):
        source = spec["source"] = {}
    source.setdefault("type", "Model")
    return doc


# ---- what a step's form changed ----


@dataclass(frozen=True)
class Edits:
    """What a step's POST writes (`data`, only the inputs the user changed and their groups),
    or, on a form shown before the draft last changed, the inputs it would overwrite."""

    data: dict[str, Any]
    conflicts: tuple[str, ...] = ()


def edits(
    slug: str,
    posted: Mapping,
    shown: Mapping | None,
    saved: Mapping[str, str],
    *,
    stale: bool,
) -> Edits:
    """The inputs of `posted` to write. `shown` is what the form showed when it was rendered
    (None when the browser did not say: every input sent counts as changed); `saved` what each
    input shows for the draft as saved now. On a `stale` form (the draft changed since it was
    rendered: another tab, a page restored by Back), an input the user changed whose saved
    value changed too since the form showed it would overwrite a newer value: those are the
    conflicts, and nothing is written."""
    inputs = STEP_INPUTS.get(slug, ())
    if shown is None:
        changed = {name for name in inputs if name in posted}
    else:
        # An input the form had not shown yet counts as empty then.
        changed = {name for name in inputs if (posted.get(name) or "") != (shown.get(name) or "")}
    if stale:
        changed = {name for name in changed if (posted.get(name) or "") != saved.get(name, "")}
        newer = {
            name
            for name in changed
            if shown is None or (name in saved and saved[name] != (shown.get(name) or ""))
        }
        if newer:
            return Edits({}, tuple(name for name in inputs if name in newer))
    for group in INPUT_GROUPS:
        if changed & set(group):
            changed |= set(group)
    return Edits({name: posted.get(name) for name in inputs if name in changed and name in posted})


def model_values(doc: Mapping) -> dict[str, str]:
    """What the Model step's inputs show for the draft: its name, profile and format, and the
    model split into the Hub repository and revision, or the URI of the user's storage."""
    uri = get(doc, URI) or ""
    hub = split_hub(uri) if uri else None
    source = "storage" if uri and hub is None else "hub"
    return values(doc, MODEL_FIELDS) | {
        "source": source,
        "repo": hub.repo if hub else "",
        "revision": hub.revision if hub else "",
        "storage_uri": uri if source == "storage" else "",
    }


def compute_values(doc: Mapping) -> dict[str, Any]:
    """What Compute's inputs show for the draft: its fields, the GPU kind picked (or the CPU),
    the scaling signal with its target, and whether the model cache is on."""
    on_gpu = get(doc, f"{MODEL}.resources.accelerator") is not None
    metric = get(doc, f"{MODEL}.scaling.metric")
    metric_kind = next(iter(metric), "") if isinstance(metric, dict) and metric else ""
    return values(doc, COMPUTE_FIELDS) | {
        "gpu_kind": (get(doc, f"{GPU}.model") or "") if on_gpu else CPU_KIND,
        "metric": metric_kind,
        "metric_target": shown(metric.get(metric_kind)) if metric_kind else "",
        "cache_enabled": bool(get(doc, f"{MODEL}.cache.enabled")),
    }


def saved_inputs(slug: str, doc: Mapping, filled: Mapping | None = None) -> dict[str, str]:
    """What the step's inputs show for the draft as saved (see `edits`); `filled`, the
    manifest with its defaults, says which choice a radio group shows when none is written."""
    filled = filled or doc
    if slug == "model":
        return model_values(doc)
    if slug == "compute":
        saved = compute_values(doc)
        saved["cache_enabled"] = "on" if saved["cache_enabled"] else ""
        return saved
    if slug == "access":
        return values(doc, ACCESS_FIELDS) | {
            "exposure": get(filled, "spec.access.exposure") or "Internal"
        }
    return values(doc, STEP_FIELDS.get(slug, ())) | {
        "api_format": shown(get(filled, f"{MODEL}.serving.apiFormat"))
    }


# ---- Model ----


@dataclass(frozen=True)
class HubSource:
    """An hf:// URI split for the form: the repository and the revision."""

    repo: str
    revision: str


def split_hub(uri: str) -> HubSource | None:
    if not isinstance(uri, str) or not uri.startswith("hf://"):
        return None
    repo, _, revision = uri[len("hf://") :].partition(":")
    return HubSource(repo, revision)


def hub_uri(repo: str, revision: str) -> str | None:
    """hf://org/name[:revision] from what was typed; a pasted Hub page or hf:// URI works too."""
    repo = _HUB_URL.sub("", (repo or "").strip()).strip("/")
    if not repo:
        return None
    if "/tree/" in repo:  # a Hub page of a branch: org/name/tree/<revision>
        repo, _, branch = repo.partition("/tree/")
        revision = revision or branch.strip("/")
    repo, _, typed_revision = repo.partition(":")
    revision = (revision or "").strip() or typed_revision.strip()
    return f"hf://{repo}:{revision}" if revision else f"hf://{repo}"


def typed_uri(text: str) -> str:
    """A model's URI from what was typed where a URI is asked: `org/name`, a Hub page or an
    hf:// URI becomes hf://org/name[:revision], as the Model step reads it; any other URI
    (s3://, an Azure Blob https:// URL...) stays as typed, for the manifest's rule to judge."""
    text = (text or "").strip()
    if "://" in text and not _HUB_URL.match(text):
        return text
    return hub_uri(text, "") or text


def sizing_key(doc: Mapping) -> tuple:
    """What a size is chosen for: the artifact (not its revision), its format and the profile
    (its cluster and GPU kinds). When it changes, Compute is sized afresh."""
    uri = get(doc, URI)
    hub = split_hub(uri) if isinstance(uri, str) else None
    where = ("hf", hub.repo.lower()) if hub else ("uri", uri)
    return (*where, get(doc, f"{MODEL}.format"), get(doc, "spec.profileName"))


def apply_model(doc: dict, data: Mapping, fixed: Iterable[str] = ()) -> dict:
    """The Model step's inputs into the draft; fixed paths are never written."""
    fixed = set(fixed)
    skeleton(doc)
    plain = [f for f in MODEL_FIELDS if f.name in ("name", "profile") and f.path not in fixed]
    apply_plain(doc, plain, data)
    if URI not in fixed:
        if data.get("source", "hub") == "storage":
            if "storage_uri" in data:
                put(doc, URI, coerce("text", data.get("storage_uri")))
        elif "repo" in data:
            put(doc, URI, hub_uri(data.get("repo", ""), data.get("revision", "")))
    format_path = f"{MODEL}.format"
    if format_path not in fixed and "format" in data:
        put(doc, format_path, coerce("text", data.get("format")))
    # An empty model block keeps "uri: required" at the uri, beside its input.
    doc["spec"]["source"].setdefault("model", {})
    return doc


def reset_sizing(doc: dict) -> dict:
    """Another model: what was sized for the last one goes, so the new one is sized afresh."""
    for path in SIZING_GROUPS:
        remove(doc, path)
    return doc


# ---- Compute ----


def apply_compute(doc: dict, data: Mapping, fixed: Iterable[str] = ()) -> dict:
    fixed = set(fixed)
    kind = (data.get("gpu_kind") or "").strip()
    if kind == CPU_KIND:
        remove(doc, f"{MODEL}.resources.accelerator")
    elif kind:
        put(doc, f"{GPU}.model", kind)
        put(doc, f"{GPU}.countPerReplica", coerce("int", data.get("gpus")) or 1)
        if "capacity" in data:
            put(doc, f"{GPU}.capacityType", coerce("text", data.get("capacity")))
    apply_plain(doc, [f for f in COMPUTE_PLAIN if f.path not in fixed], data)
    # One model copy is split over exactly the GPUs and nodes reserved: follow them.
    if {"gpu_kind", "gpus", "nodes"} & set(data):
        remove(doc, f"{MODEL}.engine.tensorParallelSize")
        remove(doc, f"{MODEL}.engine.pipelineParallelSize")
    if "metric" in data:
        metric = data.get("metric")
        target = coerce("number", data.get("metric_target"))
        put(doc, f"{MODEL}.scaling.metric", {metric: target} if metric in METRICS else None)
    if "cache_shown" in data:
        if data.get("cache_enabled"):
            put(doc, f"{MODEL}.cache.enabled", True)
            put(doc, f"{MODEL}.cache.size", coerce("text", data.get("cache_size")))
            put(doc, f"{MODEL}.cache.nodeGroup", coerce("text", data.get("cache_node_group")))
        else:
            remove(doc, f"{MODEL}.cache")
    return doc


def apply_size(doc: dict, gpu_kind: str | None, gpus: int, nodes: int) -> dict:
    """Write a size ServeDeck chose (Check model's suggestion), or the CPU."""
    if gpu_kind is None:
        remove(doc, f"{MODEL}.resources.accelerator")
        remove(doc, f"{MODEL}.resources.nodesPerReplica")
        return doc
    put(doc, f"{GPU}.model", gpu_kind)
    put(doc, f"{GPU}.countPerReplica", gpus)
    put(doc, f"{MODEL}.resources.nodesPerReplica", nodes if nodes > 1 else None)
    return doc


def apply_model_defaults(doc: dict, defaults: ModelDefaults) -> dict:
    """Pre-fill the draft with the defaults its dry run took from the model (its pinned commit,
    context window, memory on CPU): mf.model_defaults decided them, so Compute shows them in
    its inputs and the draft is the manifest YAML would have given."""
    if defaults.uri is not None:
        put(doc, URI, defaults.uri)
    if defaults.context_tokens is not None:
        put(doc, f"{MODEL}.serving.maxContextTokens", defaults.context_tokens)
    if defaults.memory is not None:
        put(doc, f"{MODEL}.resources.memory", format_bytes(defaults.memory))
    return doc


# ---- Access and API ----


def apply_access(doc: dict, data: Mapping) -> dict:
    """Internal only, or On your domain with the domain and access policy picked (the manifest
    rules check both are the organisation's)."""
    if data.get("exposure") == "Internal":
        put(doc, "spec.access", {"exposure": "Internal"})
    elif data.get("exposure") == "Domain":
        access = {
            "exposure": "Domain",
            "domain": coerce("text", data.get("domain")),
            "accessPolicy": coerce("text", data.get("access_policy")),
        }
        put(doc, "spec.access", {k: v for k, v in access.items() if v is not None})
    return doc


def apply_api(doc: dict, data: Mapping, media: Iterable[str] = ()) -> dict:
    """The API format, and media per request for the modalities the model takes."""
    if "api_format" in data:
        put(doc, f"{MODEL}.serving.apiFormat", coerce("text", data.get("api_format")))
    media = set(media)
    apply_plain(doc, [f for f in MEDIA_FIELDS if MEDIA_MODALITY[f.name] in media], data)
    return doc


# ---- problems beside fields ----


def errors_by_field(
    problems: Iterable[Problem], fields: Iterable[Field]
) -> tuple[dict[str, list[Problem]], list[Problem]]:
    """Each problem beside the input it is about, and the ones no input of the step is about
    (shown above the form)."""
    fields = list(fields)
    placed: dict[str, list[Problem]] = {}
    general: list[Problem] = []
    for problem in problems:
        path = problem.field
        if problem.about:  # said at another path: beside its field it needs neither
            message = problem.message.removeprefix(path).lstrip(" :")
            problem = Problem(path, message, problem.level, problem.origin)
        inside = [f for f in fields if under(path, f.path)]
        around = [f for f in fields if under(f.path, path)]
        if inside:
            target = max(inside, key=lambda f: len(f.path))
        elif len(around) == 1:  # a group with one input: beside it; a larger group: above
            target = around[0]
        else:
            general.append(problem)
            continue
        placed.setdefault(target.name, []).append(labelled(problem, target))
    return placed, general


def _words(label: str) -> str:
    """A label inside a sentence: "Context window" -> "context window", "CPU" stays."""
    return label if label.isupper() else label[0].lower() + label[1:]


# Every wizard field's manifest path as a sentence may spell it (from spec.source.model or
# spec), longest first, with the label's words.
_OTHER_PATHS = sorted(
    {
        (f.path.removeprefix(prefix), _words(LABELS[f.name]))
        for fields in STEP_FIELDS.values()
        for f in fields
        for prefix in (f"{MODEL}.", "spec.")
        if f.path.startswith(prefix) and "." in f.path.removeprefix(prefix)
    },
    key=lambda pair: -len(pair[0]),
)


def labelled(problem: Problem, beside: Field) -> Problem:
    """A problem as said beside an input: in the words of its label, not the manifest's
    paths ("Context window: ... Set context window to 8192", not "Set
    serving.maxContextTokens ...")."""
    label = LABELS.get(beside.name)
    if label is None:
        return problem
    words = _words(label)
    message = problem.message
    relative = [problem.path, beside.path]
    for prefix in (f"{MODEL}.", "spec."):
        relative += [p.removeprefix(prefix) for p in (problem.path, beside.path)]
    for path in sorted({p for p in relative if "." in p}, key=len, reverse=True):
        message = message.replace(path, words)
    for path, other in _OTHER_PATHS:  # other fields it names, by their labels too
        message = re.sub(rf"(?<![\w.]){re.escape(path)}\b", other, message)
    last = beside.path.rsplit(".", 1)[-1]
    if last != last.lower():  # a manifest key (camelCase), not a word of the sentence
        message = re.sub(rf"\b{re.escape(last)}\b", words, message)
    if not message.startswith(label):
        message = f"{label}: {message}"
    return Problem(problem.path, message, problem.level, problem.origin)
