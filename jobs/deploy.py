"""The verbs on applications: dry run, apply (create or update), deploy, roll back and delete.

The wizard, the REST API and the command line all call these; they never touch models directly.
"""

from dataclasses import dataclass, field, replace

from django.db import transaction
from django.utils import timezone

from accesspolicies import audit, domains
from accesspolicies.access import require
from accesspolicies.models import AccessPolicy
from jobs import manifest as mf
from jobs.backends import BackendFailed, backend_for
from jobs.lifecycle import Observed, record_status
from jobs.manifest.context import ExistingApplication, ManifestContext
from jobs.models import Application, Event, Phase, Profile, Revision
from jobs.render import RenderError, render_for_profile
from models_catalog.check import CheckResult
from models_catalog.models import ModelMaster
from models_catalog.service import (
    check_for_profile,
    context_over_limit,
    layout_refusal,
    model_facts,
)

# Problems at these paths make Check model pointless: it would only repeat them.
CHECK_INPUTS = ("spec.profileName", "spec.source.model.uri", "spec.source.model.format")


@dataclass
class DryRun:
    """What applying a manifest would do; saves nothing."""

    manifest: dict | None
    refusals: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    runtime: str | None = None
    scaling: str | None = None
    exists: bool = False
    changed: bool = True
    check: CheckResult | None = None
    objects: list = field(default_factory=list)  # what a Kubernetes profile's cluster gets

    @property
    def ok(self) -> bool:
        return not self.refusals

    def problems(self) -> list[dict]:
        return [p.as_dict() for p in [*self.refusals, *self.warnings]]

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "action": ("update" if self.exists else "create") if self.changed else "unchanged",
            "refusals": [p.as_dict() for p in self.refusals],
            "warnings": [p.as_dict() for p in self.warnings],
            "runtime": self.runtime,
            "scaling": self.scaling,
            "check": self.check.as_dict() if self.check else None,
            "objects": self.objects,
            "manifest": self.manifest,
        }


class Refused(Exception):
    """The manifest has refusals; `dry_run` carries every one of them."""

    def __init__(self, dry_run: DryRun):
        super().__init__("; ".join(str(p) for p in dry_run.refusals))
        self.dry_run = dry_run


class ActionError(Exception):
    """A verb that cannot go ahead, with a message that says why and what to do."""

    def __init__(self, path: str, message: str, status: int = 400):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.status = status

    def as_dict(self) -> dict:
        return {"path": self.path, "message": self.message, "level": "refusal"}


@dataclass
class Applied:
    application: Application
    revision: Revision | None
    dry_run: DryRun
    created: bool


def manifest_context(
    organization, application: Application | None, uri: str | None = None
) -> ManifestContext:
    profiles = Profile.objects.filter(organization=organization).select_related("cluster")
    master = ModelMaster.objects.for_uri(organization, uri)
    existing = None
    if application is not None:
        existing = ExistingApplication(
            manifest=application.manifest,
            created_at=application.created_at,
            served_at=application.served_at,
        )
    return ManifestContext(
        profiles={p.name: p.facts() for p in profiles},
        verified_domains=domains.verified_names(organization),
        access_policies=frozenset(
            AccessPolicy.objects.filter(organization=organization).values_list("name", flat=True)
        ),
        existing=existing,
        engine_defaults=master.engine_defaults() if master else {},
    )


def _field(doc, *path) -> str | None:
    """A string deep in a document that may be malformed; None when it is not there."""
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, str) else None


def dry_run(doc, organization, *, expect_name: str | None = None) -> DryRun:
    """Parse, fill defaults and check `doc` (text or mapping) against the organisation's state."""
    if isinstance(doc, str | bytes):
        try:
            doc = mf.load_document(doc)
        except mf.DocumentError as error:
            return DryRun(manifest=None, refusals=list(error.problems))
    name = _field(doc, "spec", "name")
    if expect_name is not None and name != expect_name:
        problem = mf.Problem(
            "spec.name",
            f"{name!r} does not match the application addressed ({expect_name!r}); "
            "send the manifest of that application, or create a new one instead.",
            "refusal",
        )
        return DryRun(manifest=None, refusals=[problem])
    application = (
        Application.objects.filter(organization=organization, name=name).first() if name else None
    )
    uri = _field(doc, "spec", "source", "model", "uri")
    ctx = manifest_context(organization, application, uri)
    result = mf.parse(doc, ctx)
    checked = _check_model(result, organization)
    facts = model_facts(checked) if checked else None
    if facts is not None:
        # Parse again knowing the model: its context limit and modalities have rules too.
        result = mf.parse(doc, replace(ctx, model=facts))
    run = DryRun(
        manifest=result.manifest,
        refusals=list(result.refusals),
        warnings=list(result.warnings),
        exists=application is not None,
        check=checked,
    )
    if checked is not None:
        _add_check_problems(run, checked)
        layout = _layout_refusal(result.manifest, checked)
        if layout is not None:
            run.refusals.append(layout)
    if result.manifest is not None and run.ok:
        _on_target(run, organization)
    if result.manifest is not None and run.ok:
        run.runtime = mf.runtime_of(result.manifest)
        run.scaling = mf.scaling_of(result.manifest)
        run.changed = application is None or application.manifest != result.manifest
    return run


def _check_model(result, organization) -> CheckResult | None:
    """Check model for the manifest's artifact on its profile, unless its inputs are wrong."""
    manifest = result.manifest
    if manifest is None or any(p.path.startswith(CHECK_INPUTS) for p in result.refusals):
        return None
    spec = manifest["spec"]
    model = spec["source"].get("model")
    if spec["source"].get("type") != "Model" or not isinstance(model, dict):
        return None
    profile = Profile.objects.filter(organization=organization, name=spec["profileName"]).first()
    if profile is None:
        return None
    engine = model.get("engine") or {}
    serving = model.get("serving") or {}
    return check_for_profile(
        model["uri"],
        profile,
        context_tokens=serving.get("maxContextTokens"),
        concurrency=serving.get("maxConcurrentRequests") or 1,
        format=model.get("format"),
        gpu_memory_utilization=engine.get("gpuMemoryUtilization"),
    )


def _on_target(run: DryRun, organization) -> None:
    """Render for a Kubernetes profile, and ask the profile's backend whether it can run it
    (the server-side dry run on a cluster; vLLM and GPUs on this machine)."""
    spec = run.manifest["spec"]
    profile = Profile.objects.select_related("cluster").get(
        organization=organization, name=spec["profileName"]
    )
    if profile.cluster.backend == profile.cluster.Backend.KUBERNETES:
        try:
            run.objects = render_for_profile(run.manifest, profile)
        except RenderError as error:
            run.refusals.append(mf.Problem("spec", f"cannot be rendered for Kubernetes: {error}"))
            return
    preflight = backend_for(profile).preflight(run.manifest, run.objects)
    run.refusals += [mf.Problem("spec.profileName", text) for text in preflight.refusals]
    run.warnings += [mf.Problem("spec.profileName", text, "warning") for text in preflight.warnings]


def _layout_refusal(manifest: dict | None, checked: CheckResult):
    """Whether the GPUs the manifest reserves hold the model, by Check model's sizing."""
    model = (manifest or {}).get("spec", {}).get("source", {}).get("model") or {}
    resources = model.get("resources") or {}
    gpu = (resources.get("accelerator") or {}).get("gpu") or {}
    return layout_refusal(
        checked, gpu.get("model"), gpu.get("countPerReplica"), resources.get("nodesPerReplica")
    )


def _add_check_problems(run: DryRun, checked: CheckResult) -> None:
    path = "spec.source.model.uri"
    verdict = (
        checked.verdict if checked.verdict.endswith((".", "?", "!")) else checked.verdict + "."
    )
    said = f"{verdict} {checked.next_step}".strip()
    if checked.inconclusive:
        run.warnings.append(mf.Problem(path, said, "warning"))
    elif not checked.can_serve and not context_over_limit(checked, run.manifest):
        run.refusals.append(mf.Problem(path, said, "refusal"))
    said = {p.message for p in run.warnings}
    pinned_already = any(p.path == path and "pin" in p.message for p in run.warnings)
    for warning in checked.warnings:
        if warning in said or (pinned_already and "pin" in warning.lower()):
            continue
        run.warnings.append(mf.Problem(path, warning, "warning"))


def apply(doc, membership, *, expect_name: str | None = None, create_only=False) -> Applied:
    """Create or update an application from a manifest; a change becomes a new revision."""
    require(membership, "deploy", "applications")
    organization = membership.organization
    run = dry_run(doc, organization, expect_name=expect_name)
    if not run.ok:
        raise Refused(run)
    spec = run.manifest["spec"]
    if create_only and run.exists:
        raise ActionError(
            "spec.name",
            f"an application named {spec['name']!r} already exists; update it instead "
            f"(PUT /api/v1/applications/{spec['name']}) or choose another name.",
            status=409,
        )
    with transaction.atomic():
        application = (
            Application.objects.select_for_update()
            .filter(organization=organization, name=spec["name"])
            .first()
        )
        if application is not None and application.manifest == run.manifest:
            return Applied(application, None, run, created=False)
        created = application is None
        profile = Profile.objects.get(organization=organization, name=spec["profileName"])
        now = timezone.now()
        if created:
            application = Application(organization=organization, name=spec["name"], created_at=now)
        application.profile = profile
        application.manifest = run.manifest
        application.updated_at = now
        application.save()
        revision = _new_revision(application, run.manifest, membership.user)
        _record(application, "Saved", f"Revision {revision.number} saved by {membership.user}.")
        if spec.get("syncType", "Auto") == "Auto":
            deploy(application, revision)
        else:
            revision.outcome = Revision.Outcome.WAITING
            revision.message = "syncType is Manual: deploy it explicitly to apply it."
            revision.save(update_fields=["outcome", "message"])
        audit.record(
            organization,
            membership.user,
            "application.apply",
            "application",
            application.name,
            {"revision": revision.number, "created": created},
        )
    return Applied(application, revision, run, created=created)


def _new_revision(application, manifest, user, rolled_back_from=None) -> Revision:
    last = application.revisions.order_by("-number").values_list("number", flat=True).first()
    return Revision.objects.create(
        application=application,
        number=(last or 0) + 1,
        manifest=manifest,
        created_by=user,
        rolled_back_from=rolled_back_from,
    )


def _record(application, reason: str, message: str, kind=Event.Kind.NORMAL) -> None:
    Event.objects.create(application=application, reason=reason, message=message, kind=kind)


def deploy(application: Application, revision: Revision | None = None) -> Revision:
    """Hand a revision (the latest by default) to the profile's cluster backend."""
    revision = revision or application.revisions.order_by("-number").first()
    try:
        observed = backend_for(application.profile).apply(application, revision)
    except BackendFailed as failure:
        revision.outcome = Revision.Outcome.FAILED
        revision.message = failure.reason
        observed = Observed(
            phase=Phase.FAILED,
            reason=failure.reason,
            next_step=failure.next_step,
            desired_replicas=_min_replicas(revision.manifest),
        )
    else:
        revision.outcome = Revision.Outcome.APPLIED
        revision.message = ""
    revision.save(update_fields=["outcome", "message"])
    application.deployed_at = timezone.now()
    application.save(update_fields=["deployed_at"])
    record_status(application, observed)
    return revision


def _min_replicas(manifest: dict) -> int:
    model = manifest["spec"]["source"].get("model") or {}
    return model.get("scaling", {}).get("minReplicas", 1)


def deploy_latest(application: Application, membership) -> Revision:
    require(membership, "deploy", "applications")
    with transaction.atomic():
        revision = deploy(application)
        audit.record(
            application.organization,
            membership.user,
            "application.deploy",
            "application",
            application.name,
            {"revision": revision.number, "outcome": revision.outcome},
        )
    return revision


def rollback(application: Application, number: int, membership) -> Applied:
    """Apply revision `number` again as a new revision; never automatic."""
    require(membership, "deploy", "applications")
    application.refresh_from_db()  # compare with what runs now, not a copy loaded earlier
    target = application.revisions.filter(number=number).first()
    if target is None:
        numbers = list(application.revisions.values_list("number", flat=True))
        raise ActionError(
            "revision",
            f"{application.name} has no revision {number}; its history has revisions "
            f"{min(numbers)} to {max(numbers)}. Pick one of those.",
        )
    if target.manifest == application.manifest:
        raise ActionError(
            "revision",
            f"revision {number} is what {application.name} runs now; nothing to roll back. "
            "Pick an earlier revision with a different manifest.",
        )
    run = dry_run(target.manifest, application.organization, expect_name=application.name)
    if not run.ok:
        raise Refused(run)
    with transaction.atomic():
        application.manifest = run.manifest
        application.updated_at = timezone.now()
        application.save(update_fields=["manifest", "updated_at"])
        revision = _new_revision(
            application, run.manifest, membership.user, rolled_back_from=number
        )
        _record(
            application,
            "RolledBack",
            f"Revision {revision.number} rolls back to revision {number}, by {membership.user}.",
        )
        deploy(application, revision)
        audit.record(
            application.organization,
            membership.user,
            "application.rollback",
            "application",
            application.name,
            {"to": number, "revision": revision.number},
        )
    return Applied(application, revision, run, created=False)


def _operate(verb: str, application: Application, membership) -> Observed:
    require(membership, "deploy", "applications")
    try:
        observed = getattr(backend_for(application.profile), verb)(application)
    except BackendFailed as failure:
        raise ActionError(application.name, f"{failure.reason} {failure.next_step}") from None
    _record(application, verb.capitalize(), f"{verb.capitalize()} by {membership.user}.")
    audit.record(
        application.organization,
        membership.user,
        f"application.{verb}",
        "application",
        application.name,
    )
    record_status(application, observed)
    return observed


def restart(application: Application, membership) -> Observed:
    """Replace the replicas; storage, caches and settings stay."""
    return _operate("restart", application, membership)


def stop(application: Application, membership) -> Observed:
    """Stop serving and free the GPUs; the configuration stays for start."""
    return _operate("stop", application, membership)


def start(application: Application, membership) -> Observed:
    return _operate("start", application, membership)


def delete(application: Application, membership) -> None:
    """Remove the replicas, everything rendered for it, its storage and its history."""
    require(membership, "deploy", "applications")
    try:
        backend_for(application.profile).delete(application)
    except BackendFailed as failure:
        raise ActionError(
            application.name, f"could not be deleted: {failure.reason} {failure.next_step}"
        ) from None
    organization, name = application.organization, application.name
    application.delete()
    audit.record(organization, membership.user, "application.delete", "application", name)
