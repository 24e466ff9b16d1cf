"""The wizard's verbs: where a draft stands (one dry run, its problems sorted to the steps),
saving a step's inputs into the draft, and deploying it. Views call these and render.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from jobs import deploy as verbs
from jobs import manifest as mf
from jobs.backends import backend_for
from jobs.dry_run import CheckModelCalls, DryRun, check_for_profile, check_inputs, manifest_context
from jobs.manifest.view import FilledManifest
from jobs.models import Application, Draft, Profile
from jobs.token_refs import profile_token
from jobs.wizard import drafts, steps
from jobs.wizard.fields import (
    Edits,
    apply_access,
    apply_api,
    apply_compute,
    apply_model,
    apply_model_defaults,
    apply_size,
    edits,
    reset_sizing,
    saved_inputs,
    sizing_key,
    skeleton,
)
from jobs.wizard.names import suggest_name
from jobs.wizard.paths import MODEL, copied, get, put
from jobs.wizard.sizing import chosen_size
from models_catalog import hub
from models_catalog.check_types import CheckResult
from models_catalog.models import ModelMaster

CONTEXT = f"{MODEL}.serving.maxContextTokens"
URI = f"{MODEL}.uri"
SEARCH_LIMIT = 8
SEARCH_MIN_CHARS = 2


@dataclass
class State:
    """Where a draft stands: its dry run, and each step's refusals and warnings."""

    draft: Draft
    run: DryRun
    refusals: dict[str, list[mf.Problem]]
    warnings: dict[str, list[mf.Problem]]
    fixed: dict[str, str] = field(default_factory=dict)  # path -> why it cannot change

    @property
    def check(self) -> CheckResult | None:
        return self.run.check

    @property
    def manifest(self) -> dict:
        """The filled-in manifest (every default), else the draft as written."""
        return self.run.manifest or self.draft.manifest

    @cached_property
    def blocked(self) -> str | None:
        """The first step with a refusal pending; None when the draft may be deployed."""
        blocked = steps.first_blocked(self.refusals)
        if blocked is None and self.run.manifest is not None and self.check is None:
            return "check"  # nothing refused, yet Check model could not run: never skip it
        return blocked

    def reachable(self, slug: str) -> bool:
        return self.blocked is None or steps.index(slug) <= steps.index(self.blocked)

    @property
    def digest(self) -> str:
        return digest(self.run.manifest)


def digest(manifest: Mapping | None) -> str:
    """A fingerprint of the manifest Review showed, so Deploy applies exactly that."""
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fixed_fields(application: Application | None) -> dict[str, str]:
    """What cannot change on an existing application, and why (docs/manifest.md's fixed fields)."""
    if application is None:
        return {}
    created = f"Fixed since the application was created on {application.created_at:%Y-%m-%d}"
    fixed = {
        "spec.name": "Fixed: the name is the application. To serve under another name, deploy "
        "a new model.",
        "spec.profileName": f"{created}. To move it, deploy it again under a new name.",
        "spec.namespace": f"{created}.",
        f"{MODEL}.queue.name": f"{created}.",
    }
    if application.served_at is not None:
        served = (
            f"Fixed since the model first served on {application.served_at:%Y-%m-%d}. To serve "
            "other bytes, deploy a new model under a new name."
        )
        for path in ("uri", "format", "runtime.engine", "runtime.isolation"):
            fixed[f"{MODEL}.{path}"] = served
    return fixed


def name_clash(organization, draft: Draft, name: object) -> mf.Problem | None:
    """A new model may not take the name of one that exists: Deploy would change that one."""
    if draft.application_id is not None or not isinstance(name, str) or not name:
        return None
    if not Application.objects.filter(organization=organization, name=name).exists():
        return None
    return mf.Problem(
        "spec.name",
        f"{name!r} is taken: a model of that name runs already; accepts a name no model has. "
        f"Pick another name, or change {name} itself with its Edit.",
    )


def look(
    draft: Draft,
    run: DryRun | None = None,
    *,
    server_side: bool = False,
    checks: CheckModelCalls | None = None,
) -> State:
    """Dry-run the draft (or take the dry run just made of it) and sort its problems to the
    steps. `server_side` asks a Kubernetes profile's cluster too: Review and Deploy do."""
    application = draft.application
    if run is None:
        run = _dry_run(draft, draft.manifest, checks, server_side=server_side)
    clash = name_clash(draft.organization, draft, get(draft.manifest, "spec.name"))
    refusals = ([clash] if clash else []) + list(run.refusals)
    return State(
        draft=draft,
        run=run,
        refusals=steps.by_step(refusals),
        warnings=steps.by_step(run.warnings),
        fixed=fixed_fields(application),
    )


def start(membership, data: Mapping) -> State:
    """The first Model step of a new draft. The draft is saved only once the Model step has
    nothing to fix: a refused first step shows its problems and leaves no draft behind."""
    draft = drafts.unsaved_draft(membership, skeleton({}))
    doc, run = _model_doc(draft, data)
    draft.manifest = doc
    state = look(draft, run)
    if state.refusals["model"]:
        return state
    drafts.save(draft, doc)
    return state


def save_model(draft: Draft, data: Mapping) -> State:
    """The Model step's inputs into the draft (see _model_doc)."""
    if not data:  # nothing changed on the form: nothing to write
        return look(draft)
    doc, run = _model_doc(draft, data)
    return look(drafts.save(draft, doc), run)


def _model_doc(draft: Draft, data: Mapping) -> tuple[dict, DryRun | None]:
    """The draft's manifest with the Model step's inputs, and its dry run when one was made.
    Another model or profile than before is sized afresh: the size Check model chooses for it
    at the context window the manifest will fill, then one dry run of the sized draft, sharing
    Check model's answer; the draft is pre-filled with the defaults that dry run took from the
    model (mf.model_defaults), as YAML gets them."""
    doc = copied(draft.manifest)
    before = sizing_key(doc)
    apply_model(doc, data, fixed_fields(draft.application))
    if sizing_key(doc) == before:
        return doc, None
    reset_sizing(doc)
    checks = CheckModelCalls()
    master = ModelMaster.objects.for_uri(draft.organization, get(doc, f"{MODEL}.uri"))
    wanted_context = master.max_context_tokens if master is not None else None
    put(doc, CONTEXT, mf.default_context(wanted_context, None))
    checked = str(data.get("context", "")).strip()  # the context Check model was asked for
    if checked.isdigit() and int(checked) > 0:
        wanted_context = int(checked)
        put(doc, CONTEXT, wanted_context)
    engine_defaults = master.engine_defaults() if master is not None else {}
    check = _ask(draft, doc, checks, engine_defaults)
    if check is not None and get(doc, CONTEXT) != (
        context := mf.default_context(wanted_context, check.max_context_tokens)
    ):
        put(doc, CONTEXT, context)  # the master asks more than the model has: the model's own
        check = _ask(draft, doc, checks, engine_defaults)
    doc, run = _sized(draft, doc, check, checks)
    return apply_model_defaults(doc, run.model_defaults), run


def _profile_of(draft: Draft, doc: dict) -> Profile | None:
    name = FilledManifest(doc).profile_name or ""
    return (
        Profile.objects.filter(organization=draft.organization, name=name)
        .select_related("cluster", "organization")
        .first()
    )


def _ask(
    draft: Draft, doc: dict, checks: CheckModelCalls, engine_defaults: Mapping
) -> CheckResult | None:
    """Check model for the draft's model on its profile, to size it (None: nothing to ask).
    Asked with the GPU memory share the draft will be filled with (the model master's or the
    built-in default), as its dry run asks: the two share one answer."""
    filled = FilledManifest(doc)
    profile = _profile_of(draft, doc)
    if filled.uri is None or profile is None:
        return None
    inputs = check_inputs(filled)
    if inputs["gpu_memory_utilization"] is None:
        utilization = mf.engine_default("gpuMemoryUtilization", engine_defaults)
        inputs["gpu_memory_utilization"] = utilization
    return checks.ask(filled.uri, profile, **inputs)


def _dry_run(
    draft: Draft, doc: dict, checks: CheckModelCalls | None, *, server_side: bool = False
) -> DryRun:
    application = draft.application
    return verbs.dry_run(
        doc,
        draft.organization,
        expect_name=application.name if application else None,
        server_side=server_side,
        checks=checks,
    )


def _sized(
    draft: Draft, doc: dict, check: CheckResult | None, checks: CheckModelCalls
) -> tuple[dict, DryRun]:
    """Keep the size ServeDeck chose: Check model's suggestion when the profile's cluster can
    run it (this machine may have no GPU), else the CPU (with the memory the fill gives it)."""
    kind, gpus, nodes = chosen_size(check)
    if kind is not None and _target_has(draft, doc, gpus * nodes):
        trial = apply_size(copied(doc), kind, gpus, nodes)
        trial_run = _dry_run(draft, trial, checks)
        if not steps.by_step(trial_run.refusals)["compute"]:
            return trial, trial_run
    return doc, _dry_run(draft, doc, checks)


def _target_has(draft: Draft, doc: dict, gpus: int) -> bool:
    """Whether the profile's target may have `gpus` GPUs for one replica, asked before the
    size is dry-run: this machine says how many it has (a local profile), a cluster's catalog
    already answered through Check model."""
    profile = _profile_of(draft, doc)
    if profile is None:
        return True
    here = backend_for(profile).gpus_here()
    return here is None or here >= gpus


def save_step(draft: Draft, slug: str, data: Mapping, *, server_side: bool = False) -> State:
    """Compute, Access or API inputs into the draft (saved whether or not they pass); no input
    changed, nothing is written."""
    if not data:
        return look(draft, server_side=server_side)
    doc = copied(draft.manifest)
    if slug == "compute":
        apply_compute(doc, data, fixed_fields(draft.application))
    elif slug == "access":
        apply_access(doc, data)
    elif slug == "api":
        apply_api(doc, data, media=("image", "video", "audio"))
    return look(drafts.save(draft, doc), server_side=server_side)


def stamp(draft: Draft | None) -> str:
    """The draft's version as a form shows it: a step posted with another stamp was shown
    before the draft last changed (another tab, or a page Back restored)."""
    return digest(draft.manifest) if draft is not None and draft.pk else ""


def posted_edits(draft: Draft, slug: str, data: Mapping) -> Edits:
    """What a step's POST writes: only the inputs the user changed from what the form showed
    (the browser reports that as `shown`), and nothing over a value saved since the form was
    shown (see fields.edits)."""
    stale = "stamp" in data and data.get("stamp") != stamp(draft)
    shown = _shown(data.get("shown"))
    filled = look(draft).manifest if stale and slug == "api" else None
    saved = saved_inputs(slug, draft.manifest, filled)
    return edits(slug, data, shown, saved, stale=stale)


def _shown(text: object) -> dict | None:
    try:
        shown = json.loads(text) if isinstance(text, str) and text else None
    except ValueError:
        return None
    if not isinstance(shown, dict):
        return None
    return {str(k): v if isinstance(v, str) else str(v) for k, v in shown.items()}


def memory_at(draft: Draft, data: Mapping) -> CheckResult | None:
    """Check model again for the context and requests-at-once being typed on Compute (the Hub's
    answers are cached, so this is sizing arithmetic), before anything is saved."""
    uri = get(draft.manifest, f"{MODEL}.uri")
    profile = Profile.objects.filter(
        organization=draft.organization, name=get(draft.manifest, "spec.profileName")
    ).first()
    if not isinstance(uri, str) or profile is None:
        return None
    context = _whole(data.get("context"))
    concurrency = _whole(data.get("concurrency")) or 1
    return check_for_profile(
        uri,
        profile,
        context_tokens=context,
        concurrency=concurrency,
        format=get(draft.manifest, f"{MODEL}.format"),
        gpu_memory_utilization=_fraction(data.get("gpu_memory_utilization")),
        dtype=FilledManifest(draft.manifest).dtype,
    )  # the live preview of Compute: not a dry run


def _whole(text: object) -> int | None:
    text = str(text or "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _fraction(text: object) -> float | None:
    try:
        value = float(str(text or "").strip())
    except ValueError:
        return None
    return value if 0.1 <= value <= 0.99 else None


# ---- the Model step's helpers: name as typed, Hub search, current commit ----


def suggested_name(organization, repo: str, draft: Draft | None = None) -> str:
    """A free name from the model's repository (see jobs.wizard.names)."""
    return suggest_name(repo, drafts.taken_names(organization, draft)) if repo else ""


def name_problems(membership, draft: Draft | None, name: str, profile: str) -> list[mf.Problem]:
    """The manifest's rules on spec.name for `name` on `profile`, and the name-taken check."""
    doc = {
        "apiVersion": mf.API_VERSION,
        "kind": mf.KIND,
        "spec": {
            "name": name,
            "profileName": profile,
            "source": {"type": "Model", "model": {"uri": "hf://org/model"}},
        },
    }
    result = mf.parse(doc, manifest_context(membership.organization, None))
    problems = [p for p in result.refusals if p.path == "spec.name"]
    clash = name_clash(membership.organization, draft or Draft(), name)
    return problems + ([clash] if clash else [])


def _token(membership, profile_name: str | None) -> str | None:
    profile = Profile.objects.filter(
        organization=membership.organization, name=profile_name or ""
    ).first()
    return profile_token(profile) if profile else None


def search_hub(membership, query: str, profile_name: str | None) -> list[hub.HubModel]:
    """Hugging Face models whose id contains `query`, most downloaded first (with the
    profile's token, so gated models it opens are found as it sees them)."""
    query = query.strip()
    if len(query) < SEARCH_MIN_CHARS:
        return []
    return hub.search(query, limit=SEARCH_LIMIT, token=_token(membership, profile_name))


def current_commit(membership, repo: str, profile_name: str | None) -> str | None:
    """The commit the repository's main branch points at now, to pin; None when unknown."""
    try:
        return hub.model_info(repo, None, _token(membership, profile_name)).sha or None
    except hub.HubError:
        return None


# ---- Deploy ----


class Stale(Exception):
    """The manifest is no longer the one Review showed (changed in another tab, or a default
    moved); `state` is where the draft stands now."""

    def __init__(self, state: State):
        super().__init__("the manifest changed since Review")
        self.state = state


class Blocked(Exception):
    def __init__(self, state: State):
        super().__init__(f"the {state.blocked} step has a refusal pending")
        self.state = state


def deploy(draft: Draft, membership, reviewed: str) -> verbs.Applied:
    """Apply exactly the manifest Review showed: a new application, or a new revision of the
    one the draft edits; the draft is done with then. `membership`: the member, or the
    Deployer the view decided on (apply decides on a member itself)."""
    state = look(draft, server_side=True)
    if state.blocked:
        raise Blocked(state)
    if state.digest != reviewed:
        raise Stale(state)
    application = draft.application
    applied = verbs.apply(
        draft.manifest,
        membership,
        expect_name=application.name if application else None,
        create_only=application is None,
        checked=state.run,
    )
    draft.delete()
    return applied
