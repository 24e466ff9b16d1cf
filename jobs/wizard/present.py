"""What each step's template shows, from where the draft stands (jobs.wizard.flow.State)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import yaml
from django.urls import reverse

from jobs import manifest as mf
from jobs.manifest.schema import api_formats
from jobs.models import Application, Profile
from jobs.present import dry_run_body, local_profile_note
from jobs.render import to_yaml
from jobs.wizard import steps
from jobs.wizard.fields import (
    COMPUTE_FIELDS,
    CPU_KIND,
    MEDIA_FIELDS,
    MEDIA_MODALITY,
    STEP_FIELDS,
    coerce,
    compute_values,
    errors_by_field,
    model_values,
    shown,
    split_hub,
    typed_uri,
    values,
)
from jobs.wizard.flow import State, fixed_fields, stamp
from jobs.wizard.paths import MODEL, get
from jobs.wizard.sizing import tiles
from models_catalog.models import ModelMaster
from models_catalog.service import layout_refusal
from models_catalog.sizing import human_bytes

COMMIT = re.compile(r"^[0-9a-f]{40}$")
OPENAI_ROUTES = {
    "generate": ["/v1/chat/completions", "/v1/completions"],
    "embed": ["/v1/embeddings"],
    "score": ["/v1/score", "/v1/rerank"],
    "transcribe": ["/v1/audio/transcriptions"],
}
METRIC_CHOICES = [("cpu", "CPU use (percent)"), ("requestsWaiting", "Requests waiting")]
CAPACITY_CHOICES = [
    ("OnDemand", "On-Demand: never Spot"),
    ("Spot", "Spot: cheaper, can be reclaimed"),
    ("Any", "Any capacity"),
]
STEP_LEADS = {
    "model": "Name the model, pick its profile, and choose the model: from Hugging Face or "
    "from your own storage.",
    "check": "ServeDeck read the model's metadata: whether it can be served, on what, and how "
    "much memory it needs. Nothing runs yet.",
    "compute": "Keep the size ServeDeck chose, or change it. Empty fields take the default "
    "shown in them.",
    "access": "Who may call the model.",
    "api": "The API the endpoint speaks, and what one request may carry.",
    "review": "The dry run of the manifest: exactly what Deploy applies.",
}


def step_url(draft, slug: str) -> str:
    """The address of a draft's step."""
    return reverse(f"jobs:wizard-{slug}", kwargs={"key": draft.key})


def yaml_text(data: Any) -> str:
    """A manifest as the application page and `app get` print it."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def stepper(state: State | None, current: str) -> list[dict]:
    """Each step: done, current, or not yet; a link once it can be reached; flagged when it
    has a refusal pending."""
    out = []
    saved = state is not None and state.draft.pk is not None
    for step in steps.STEPS:
        reachable = saved and state.reachable(step.slug)
        out.append(
            {
                "slug": step.slug,
                "title": step.title,
                "number": steps.index(step.slug) + 1,
                "current": step.slug == current,
                "done": steps.index(step.slug) < steps.index(current),
                "url": step_url(state.draft, step.slug) if reachable else None,
                "attention": bool(state and state.refusals.get(step.slug)),
            }
        )
    return out


def common(state: State | None, slug: str) -> dict:
    """What every step shows: the stepper, its problems beside fields and above the form,
    Back and Next."""
    step = steps.BY_SLUG[slug]
    refusals = state.refusals.get(slug, []) if state else []
    warnings = state.warnings.get(slug, []) if state else []
    fields = STEP_FIELDS.get(slug, ())
    errors, general = errors_by_field(refusals, fields)
    cautions, general_warnings = errors_by_field(warnings, fields)
    back, forward = steps.previous(slug), steps.following(slug)
    draft = state.draft if state and state.draft.pk else None  # unsaved: a refused first step
    return {
        "step": step,
        "lead": STEP_LEADS[slug],
        "draft": draft,
        "editing": draft.application if draft else None,
        "stepper": stepper(state, slug),
        "errors": errors,
        "general_errors": general,
        "cautions": cautions,
        "general_warnings": general_warnings,
        "action": step_url(draft, slug) if draft else reverse("jobs:wizard"),
        "next_title": steps.BY_SLUG[forward].title if forward else None,
        "locks": locks(state.fixed, fields) if state else {},
        "stamp": stamp(draft),
        "back_url": step_url(draft, back) if draft and back else reverse("console:home"),
    }


def model_context(
    membership,
    state: State | None,
    drafts: Iterable = (),
    commit: str | None = None,
    suggested: str = "",
    offered: dict | None = None,
) -> dict:
    """The Model step: name, profile, the model from the Hub or storage, its format; for a new
    draft also the member's drafts and the models they may edit. `suggested` is a free name
    from the model picked, offered while the name is empty; `offered`, the inputs a link
    fills in for a new draft."""
    doc = state.draft.manifest if state else {}
    shown_values = model_values(doc) | (offered or {})
    hub = split_hub(get(doc, f"{MODEL}.uri") or "")
    application = state.draft.application if state else None
    new = state is None or state.draft.pk is None
    context = common(state, "model")
    context["errors"] = name_in_words(context["errors"], suggested)
    return context | {
        "values": shown_values,
        "suggested_name": suggested,
        "profiles": Profile.objects.filter(organization=membership.organization),
        "formats": mf.FORMATS,
        "drafts": drafts,
        "running": (
            Application.objects.filter(organization=membership.organization).only("name")
            if new
            else ()
        ),
        "commit": commit if hub and not COMMIT.match(hub.revision or "") else None,
        "locks": locks(fixed_fields(application), STEP_FIELDS["model"]),
    }


def name_in_words(errors: dict, suggested: str) -> dict:
    """A missing name, said plainly with an example from the model picked."""
    example = suggested or "my-model"
    plain = mf.Problem(
        "spec.name",
        "Give the model a name: lowercase letters, digits and dashes, up to 63 characters, "
        f"for example {example}.",
    )
    said = [plain if "required, missing" in p.message else p for p in errors.get("name", [])]
    return errors | ({"name": said} if said else {})


def prefilled(query) -> dict:
    """The Model step of a new draft filled from Check model's "Deploy this model": the model,
    profile and format that were checked, and the context length, carried to Compute."""
    uri = typed_uri(str(query.get("uri", "")))
    out: dict[str, str] = {}
    if uri:
        hub = split_hub(uri)
        out["source"] = "hub" if hub else "storage"
        out |= {"repo": hub.repo, "revision": hub.revision} if hub else {"storage_uri": uri}
    for name in ("profile", "format"):
        if query.get(name):
            out[name] = str(query[name])
    context = str(query.get("context", "")).strip()
    if context.isdigit() and int(context) > 0:
        out["context"] = context
    return out


def check_context(state: State) -> dict:
    """Check model's answer, and whether the model may go on to Compute."""
    check = state.check
    can_go_on = state.reachable("compute") and check is not None
    return common(state, "check") | {"result": check, "can_go_on": can_go_on}


def _profile(state: State) -> Profile | None:
    return (
        Profile.objects.filter(
            organization=state.draft.organization, name=get(state.manifest, "spec.profileName")
        )
        .select_related("cluster")
        .first()
    )


def memory_summary(check) -> dict:
    """Check model's memory figure for the context asked, or why it has none."""
    if check is None:
        return {"text": "", "bad": False}
    if not check.can_serve and not check.inconclusive:
        return {"text": f"{check.verdict} {check.next_step}".strip(), "bad": True}
    needed = check.memory_text()
    if not needed:
        return {"text": "", "bad": False}
    kv = check.kv_bytes_per_token
    kv_text = f", KV cache {human_bytes(kv)} per token" if kv else ""
    on_cpu = check.suggestion is not None and check.suggestion.accelerator == "cpu"
    weights = check.weights_on_cpu if on_cpu else check.weight_bytes
    return {
        "text": f"Memory needed: {needed} (weights {human_bytes(weights)}{kv_text}).",
        "bad": False,
    }


def sizing_context(draft, check, data) -> dict:
    """The GPU tiles and the memory figure for what Compute's inputs say now (unsaved)."""
    profile = (
        Profile.objects.filter(
            organization=draft.organization, name=get(draft.manifest, "spec.profileName")
        )
        .only("machine_catalog")
        .first()
    )
    chosen = data.get("gpu_kind") or ""
    layout = layout_refusal(
        check,
        chosen if chosen != CPU_KIND else None,
        coerce("int", data.get("gpus")),
        coerce("int", data.get("nodes")),
    )
    return {
        "tiles": tiles(check, profile.machine_catalog if profile else [], chosen),
        "memory": memory_summary(check),
        "layout_errs": [layout] if layout else [],
        "live": True,
    }


def compact(number: int | None) -> str:
    """5432101 -> "5.4M", for download counts."""
    if number is None:
        return "?"
    for size, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "k")):
        if number >= size:
            return f"{number / size:.1f}".rstrip("0").rstrip(".") + suffix
    return str(number)


def hub_model(model) -> dict:
    """A Hub search result as the autocomplete shows it."""
    return {
        "id": model.id,
        "downloads": compact(model.downloads),
        "task": model.pipeline_tag,
        "gated": model.gated not in (None, False, "false"),
    }


def locks(fixed: dict[str, str], fields) -> dict[str, str]:
    """Why an input cannot change, by input name (fixed fields of a deployed model)."""
    return {f.name: fixed[f.path] for f in fields if f.path in fixed}


def compute_context(state: State, check=None, data=None) -> dict:
    """Compute's fields, the GPU tiles against Check model's sizing, and each default."""
    check = check if check is not None else state.check
    doc, filled = state.draft.manifest, state.manifest
    profile = _profile(state)
    cluster = profile.cluster if profile else None
    shown_values = compute_values(doc)
    chosen = shown_values["gpu_kind"]
    if data is not None:  # the memory preview: what is being typed, not yet saved
        shown_values |= {k: data.get(k, "") for k in ("context", "concurrency", "gpus", "nodes")}
        chosen = data.get("gpu_kind", chosen)
    master = ModelMaster.objects.for_uri(state.draft.organization, get(doc, f"{MODEL}.uri"))
    defaults = {f.name: shown(get(filled, f.path)) for f in COMPUTE_FIELDS}
    return common(state, "compute") | {
        "values": shown_values
        | {
            "gpu_kind": chosen,
            "cache_size": shown(get(doc, f"{MODEL}.cache.size"))
            or (check.cache_size if check and check.cache_size else ""),
        },
        "defaults": defaults,
        "default_metric": mf.scaling_of(filled),
        "tiles": tiles(check, profile.machine_catalog if profile else [], chosen),
        "memory": memory_summary(check),
        "check": check,
        "generative": mf.is_generative(filled),
        "vllm": get(filled, f"{MODEL}.runtime.engine") == "vllm",
        "queues": cluster.queues if cluster else [],
        "queueing": bool(cluster and "kueue" in cluster.addons),
        "kubernetes": bool(cluster and cluster.backend == cluster.Backend.KUBERNETES),
        "cache_groups": sorted(cluster.cache_node_groups) if cluster else [],
        "caching": bool(cluster and "localModelCache" in cluster.addons),
        "cacheable": not str(get(doc, f"{MODEL}.uri") or "").startswith(("pvc://", "oci://")),
        "capacity_choices": CAPACITY_CHOICES,
        "metric_choices": METRIC_CHOICES,
        "dtypes": mf.DTYPES,
        "master": master,
        "tensor_parallel": get(filled, f"{MODEL}.engine.tensorParallelSize"),
        "cpu_instead": (
            check.suggestion.describe()
            if chosen == CPU_KIND
            and check is not None
            and check.suggestion is not None
            and check.suggestion.accelerator == "gpu"
            and cluster is not None
            and cluster.backend == cluster.Backend.LOCAL
            else None
        ),
        "pipeline_parallel": get(filled, f"{MODEL}.engine.pipelineParallelSize"),
    }


def access_context(state: State) -> dict:
    """Internal only, or On your domain (offered once the organisation has a verified domain
    and an access policy)."""
    from accesspolicies.domains import verified_names
    from accesspolicies.models import AccessPolicy

    organization = state.draft.organization
    domains = sorted(verified_names(organization))
    policies = list(
        AccessPolicy.objects.filter(organization=organization).values_list("name", flat=True)
    )
    exposure = get(state.manifest, "spec.access.exposure") or "Internal"
    return common(state, "access") | {
        "exposure": exposure,
        "domains": domains,
        "policies": policies,
        "domain_ready": bool(domains and policies),
        "domain": get(state.manifest, "spec.access.domain"),
        "access_policy": get(state.manifest, "spec.access.accessPolicy"),
    }


def endpoint_paths(state: State, api_format: str) -> list[str]:
    name = get(state.manifest, "spec.name") or "<name>"
    if api_format == "V2":
        return [f"/v2/models/{name}/infer"]
    if api_format == "V1":
        return [f"/v1/models/{name}:predict"]
    task = state.check.task if state.check else None
    return OPENAI_ROUTES.get(task or "generate", ["/v1/chat/completions"]) + ["/v1/models"]


def api_context(state: State) -> dict:
    """The API formats the runtime speaks with their paths, and media per request for the
    inputs a vision, video or audio model on vLLM takes."""
    filled = state.manifest
    engine = get(filled, f"{MODEL}.runtime.engine")
    generative = mf.is_generative(filled)
    # The protocols the runtime speaks, its default first; any for a runtime of the user's.
    spoken = api_formats(engine, generative) or (("OpenAI", "V2") if generative else ("V1", "V2"))
    chosen = get(filled, f"{MODEL}.serving.apiFormat") or spoken[0]
    modalities = set(state.check.modalities) if state.check else set()
    media = [f for f in MEDIA_FIELDS if MEDIA_MODALITY[f.name] in modalities and engine == "vllm"]
    doc = state.draft.manifest
    takes = sorted({MEDIA_MODALITY[f.name] for f in media})
    lead = (
        f"The API the endpoint speaks, and how many {_and(plural(m) for m in takes)} one "
        "request may carry."
        if media
        else "The API the endpoint speaks: its protocol and the paths clients call. "
        "This model takes text in, so there is nothing to limit per request."
    )
    return common(state, "api") | {
        "lead": lead,
        "formats": [
            {"value": f, "paths": endpoint_paths(state, f), "default": f == spoken[0]}
            for f in spoken
        ],
        "chosen": chosen,
        "media": [
            {"field": f, "modality": MEDIA_MODALITY[f.name], "value": shown(get(doc, f.path))}
            for f in media
        ],
        "values": values(doc, MEDIA_FIELDS),
    }


def plural(modality: str) -> str:
    return {"image": "images", "video": "videos", "audio": "audio clips"}.get(modality, modality)


def _and(words: Iterable[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def placement(manifest: dict) -> str:
    """Where one replica runs, in words: "1 × l4 GPU, 3 CPU, 8Gi memory"."""
    resources = get(manifest, f"{MODEL}.resources") or {}
    gpu = get(resources, "accelerator.gpu")
    parts = []
    if isinstance(gpu, dict):
        count = gpu.get("countPerReplica")
        parts.append(f"{count} × {gpu.get('model') or 'any ' + str(gpu.get('vendor'))} GPU")
        nodes = resources.get("nodesPerReplica") or 1
        if nodes > 1:
            parts[-1] += f" on each of {nodes} nodes"
    else:
        parts.append("CPU")
    if resources.get("cpu"):
        parts.append(f"{resources['cpu']} CPU")
    if resources.get("memory"):
        parts.append(f"{resources['memory']} memory")
    return ", ".join(parts)


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict) or not data:
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def changes(before: Any, after: Any) -> list[dict]:
    """What a new revision changes, field by field: path, from, to (as YAML text)."""
    old, new = _flat(before), _flat(after)
    return [
        {"path": path, "before": _short(old.get(path)), "after": _short(new.get(path))}
        for path in sorted(old.keys() | new.keys())
        if old.get(path) != new.get(path)
    ]


def _short(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value)


def review_context(state: State) -> dict:
    """The dry run as every surface shows it (jobs.present.dry_run_body, the API's and the
    command line's shape): runtime, scaling, Check model, warnings and rendered objects; and
    what only the wizard adds: the outcome on the profile's target, where a replica runs, what
    a new revision changes."""
    run = state.run
    body = dry_run_body(run)
    profile = _profile(state)
    kubernetes = bool(profile and profile.cluster.backend == profile.cluster.Backend.KUBERNETES)
    # The body's warnings are the run's, one for one: shown in the order of the steps that fix
    # them, as each step shows its own.
    order = {slug: index for index, slug in enumerate(steps.SLUGS)}
    paired = zip(run.warnings, body["warnings"], strict=True)
    warnings = [said for _, said in sorted(paired, key=lambda p: order[steps.step_of(p[0])])]
    # A refused dry run names no runtime or scaling; the manifest shown below still says them.
    known = state.manifest if isinstance(state.manifest, dict) else None
    runtime = body["runtime"] or (mf.runtime_of(known) if known else None)
    scaling = body["scaling"] or (mf.scaling_of(known) if known else None)
    return common(state, "review") | {
        "dry_run": body,
        "runtime": runtime,
        "scaling": scaling,
        "manifest_yaml": yaml_text(body["manifest"]) if body["manifest"] else "",
        "objects_yaml": to_yaml(body["objects"]) if body["objects"] else "",
        "kubernetes": kubernetes,
        "local_note": local_profile_note(profile.name) if profile and not kubernetes else "",
        "profile": profile,
        "all_warnings": warnings,
        "target": [said for said in warnings if said["origin"] == "target"],
        "target_refusals": state.refusals.get("review", []),
        "placement": placement(state.manifest),
        "changes": (
            changes(state.draft.application.manifest, body["manifest"])
            if state.draft.application and body["manifest"]
            else []
        ),
        "reviewed": state.digest,
        "download": reverse("jobs:wizard-download", kwargs={"key": state.draft.key}),
    }
