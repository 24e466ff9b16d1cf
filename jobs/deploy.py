"""The verbs on applications: dry run, apply (create or update), deploy, roll back and delete.

The wizard, the REST API and the command line all call these; they never touch models directly.
Each verb that changes an application makes the deploy decision on the member it is given
(jobs.access.as_deployer): a surface that decided it already in this request hands over the
Deployer, and it is not made again.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from accesspolicies import audit
from jobs.access import as_deployer, get_profile
from jobs.backends import backend_for
from jobs.backends.base import BackendFailed, Observed
from jobs.dry_run import DryRun, dry_run, manifest_context
from jobs.lifecycle import record_status
from jobs.manifest.view import FilledManifest
from jobs.models import Application, Event, Phase, Profile, Revision
from jobs.render import APP_LABEL, RenderError, render_for_profile
from jobs.rollouts import steps as rollouts

__all__ = ["DryRun", "dry_run", "manifest_context"]  # the dry run lives in jobs.dry_run


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

    @property
    def action(self) -> str:
        """What the apply did, in the API's words (the command line says "configured")."""
        return "created" if self.created else "updated" if self.revision else "unchanged"


def apply(
    doc,
    membership,
    *,
    expect_name: str | None = None,
    create_only=False,
    checked: DryRun | None = None,
) -> Applied:
    """Create or update an application from a manifest; a change becomes a new revision.

    The revision is committed first, then handed to the backend outside any transaction (a
    cluster call can take seconds; holding the database's write lock that long fails every
    other write), then its outcome is recorded in a short transaction of its own. `checked`
    is the dry run the caller made of `doc` in this request (the wizard's Deploy): not twice.
    `membership`: the member, or the Deployer the caller decided on.
    """
    membership = as_deployer(membership).membership
    run = checked or dry_run(doc, membership.organization, expect_name=expect_name)
    if not run.ok:
        raise Refused(run)
    if create_only and run.exists:
        raise _already_exists(run.manifest["spec"]["name"])
    try:
        applied = _save(run, membership, create_only=create_only)
    except IntegrityError:
        # Another request created the same name between the dry run and this insert.
        if create_only:
            raise _already_exists(run.manifest["spec"]["name"]) from None
        applied = _save(run, membership, create_only=False)  # it exists now: update it
    if applied.revision is not None and _auto(run.manifest):
        deploy(applied.application, applied.revision, run.objects or None)
    return applied


def _auto(manifest: dict) -> bool:
    return FilledManifest(manifest).sync_type == "Auto"


def _already_exists(name: str) -> ActionError:
    return ActionError(
        "spec.name",
        f"an application named {name!r} already exists; update it instead "
        f"(PUT /api/v1/applications/{name}) or choose another name.",
        status=409,
    )


def _save(run: DryRun, membership, *, create_only: bool) -> Applied:
    """Save the manifest and its new revision in one short transaction (no backend call)."""
    organization = membership.organization
    spec = run.manifest["spec"]
    with transaction.atomic():
        application = (
            Application.objects.select_for_update()
            .filter(organization=organization, name=spec["name"])
            .first()
        )
        if application is not None and create_only:
            raise _already_exists(spec["name"])
        if application is not None and application.manifest == run.manifest:
            return Applied(application, None, run, created=False)
        if application is not None:
            _no_rollout_under_way(application, "save a new revision")
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
        if not _auto(run.manifest):
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


def _no_rollout_under_way(application: Application, verb: str) -> None:
    rollout = rollouts.active_rollout(application)
    if rollout is not None:
        raise ActionError(
            application.name,
            f"cannot {verb}: revision {rollout.canary_revision} is being rolled out as a "
            f"canary beside revision {rollout.stable_revision} ({rollout.state}). Promote it "
            f"(app promote {application.name}) or abort it (app abort {application.name}) "
            "first.",
            status=409,
        )


def deploy(
    application: Application,
    revision: Revision | None = None,
    objects: list | None = None,
    *,
    canary: bool = True,
) -> Revision:
    """Hand a revision (the latest by default) to the profile's cluster backend, then record
    the outcome. Call it outside a transaction: the backend call can take seconds. `objects`:
    what the dry run of the revision's manifest rendered (DryRun.objects), so the backend
    does not render it again; None when no dry run was made (deploy the latest). A manifest
    with spec.rollout.strategy Canary starts a rollout (jobs/rollouts) beside the revision
    serving now, unless `canary` is False (a rollback replaces at once)."""
    revision = revision or application.revisions.order_by("-number").first()
    stable = rollouts.wants_canary(application, revision) if canary else None
    if stable is not None:
        return _deploy_canary(application, revision, stable)
    try:
        observed = backend_for(application.profile).apply(application, revision, objects=objects)
    except BackendFailed as failure:
        observed = _failed(revision, failure.reason, failure.next_step)
        _record_outcome(application, revision, Revision.Outcome.FAILED, failure.reason, observed)
        return revision
    except Exception:
        # Whatever reached the cluster before this, the history must not say Pending.
        reason = (
            f"The deploy of revision {revision.number} stopped on an unexpected error; the "
            "cluster may hold part of it."
        )
        observed = _failed(revision, reason, "Deploy again; if it fails again, report it.")
        _record_outcome(application, revision, Revision.Outcome.FAILED, reason, observed)
        raise
    _record_outcome(application, revision, Revision.Outcome.APPLIED, "", observed)
    return revision


def _deploy_canary(application: Application, revision: Revision, stable: Revision) -> Revision:
    """The revision starts beside the stable one, which keeps serving (its status stays)."""
    try:
        rollouts.start(application, revision, stable)
    except BackendFailed as failure:
        outcome, message = Revision.Outcome.FAILED, f"{failure.reason} {failure.next_step}"
    else:
        outcome = Revision.Outcome.APPLIED
        message = f"Canary beside revision {stable.number}, judged step by step."
    with transaction.atomic():
        revision.outcome, revision.message = outcome, message
        revision.save(update_fields=["outcome", "message"])
        application.deployed_at = timezone.now()
        application.save(update_fields=["deployed_at"])
    return revision


def _failed(revision: Revision, reason: str, next_step: str) -> Observed:
    return Observed(
        phase=Phase.FAILED,
        reason=reason,
        next_step=next_step,
        desired_replicas=_min_replicas(revision.manifest),
    )


def _record_outcome(
    application: Application, revision: Revision, outcome: str, message: str, observed: Observed
) -> None:
    """What the backend did with a revision, in one short transaction."""
    with transaction.atomic():
        revision.outcome = outcome
        revision.message = message
        revision.save(update_fields=["outcome", "message"])
        application.deployed_at = timezone.now()
        application.save(update_fields=["deployed_at"])
        record_status(application, observed)


def _min_replicas(manifest: dict) -> int:
    return FilledManifest(manifest).min_replicas


def deploy_latest(application: Application, membership) -> Revision:
    membership = as_deployer(membership).membership
    _no_rollout_under_way(application, "deploy")
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
    membership = as_deployer(membership).membership
    application.refresh_from_db()  # compare with what runs now, not a copy loaded earlier
    target = application.revisions.filter(number=number).first()
    if target is None:
        numbers = list(application.revisions.values_list("number", flat=True))
        raise ActionError(
            "revision",
            f"{application.name} has no revision {number}; its history has revisions "
            f"{min(numbers)} to {max(numbers)}. Pick one of those.",
        )
    _no_rollout_under_way(application, "roll back")
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
        # The UPDATE takes the row's lock first, so this revision's number is read after any
        # other rollback or apply of this application has committed its own.
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
    deploy(application, revision, run.objects or None, canary=False)
    audit.record(
        application.organization,
        membership.user,
        "application.rollback",
        "application",
        application.name,
        {"to": number, "revision": revision.number},
    )
    return Applied(application, revision, run, created=False)


def promote(application: Application, membership):
    """A Canary rollout's canary to every request now (jobs/rollouts); the old revision stops
    once it serves them."""
    membership = as_deployer(membership).membership
    try:
        return rollouts.promote(application, membership.user)
    except rollouts.RolloutError as error:
        raise ActionError(application.name, error.message, error.status) from None


def abort(application: Application, membership):
    """Stop a Canary rollout's canary; the stable revision takes every request."""
    membership = as_deployer(membership).membership
    try:
        return rollouts.abort(application, membership.user)
    except rollouts.RolloutError as error:
        raise ActionError(application.name, error.message, error.status) from None


def _operate(verb: str, application: Application, membership) -> Observed:
    membership = as_deployer(membership).membership
    try:
        observed = getattr(backend_for(application.profile), verb)(application)
    except BackendFailed as failure:
        if failure.unavailable:
            raise _unavailable(application, verb, failure) from None
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


def _unavailable(
    application: Application, verb: str, failure: BackendFailed, hint: str = ""
) -> ActionError:
    """A 503: the cluster is down, nothing is wrong with what was asked."""
    return ActionError(
        application.name,
        f"cannot {verb}: cluster {application.profile.cluster.name} is unavailable "
        f"({failure.reason.rstrip('.')}). {failure.next_step} {hint}".rstrip(),
        status=503,
    )


def restart(application: Application, membership) -> Observed:
    """Replace the replicas; storage, caches and settings stay."""
    return _operate("restart", application, membership)


def stop(application: Application, membership) -> Observed:
    """Stop serving and free the GPUs; the configuration stays for start."""
    return _operate("stop", application, membership)


def start(application: Application, membership) -> Observed:
    return _operate("start", application, membership)


FORGET_HINT = (
    "To remove it from the console only, delete it again with keepOnCluster "
    "(API ?keepOnCluster=true, `app delete --keep-on-cluster`, or the page's "
    "'Delete from the console only')."
)


def delete(application: Application, membership, *, keep_on_cluster: bool = False) -> str:
    """Remove the replicas, everything rendered for it, its storage and its history.

    With `keep_on_cluster`, a cluster that does not answer does not stop the delete: the
    application leaves the console and the answer says what may still run on the cluster.
    Answers "" when the cluster removed everything, or is removing it: then (a Kubernetes
    profile whose objects take time to go) the application stays, Deleting, until the
    reconciler sees them gone and removes it.
    """
    membership = as_deployer(membership).membership
    try:
        still_there = backend_for(application.profile).delete(application)
    except BackendFailed as failure:
        if not failure.unavailable:
            raise ActionError(
                application.name, f"could not be deleted: {failure.reason} {failure.next_step}"
            ) from None
        if not keep_on_cluster:
            raise _unavailable(application, "delete", failure, FORGET_HINT) from None
        left = left_on_cluster(application)
        _forget(application, membership, keep_on_cluster=True)
        return left
    if still_there is not None:  # Deleting: the reconciler removes the row once they are gone
        with transaction.atomic():
            record_status(application, still_there)
            audit.record(
                application.organization, membership.user, "application.delete", "application",
                application.name, {},
            )  # fmt: skip
        return ""
    _forget(application, membership)
    return ""


def _forget(application: Application, membership, *, keep_on_cluster: bool = False) -> None:
    organization, name = application.organization, application.name
    with transaction.atomic():
        application.delete()
        detail = {"keepOnCluster": True} if keep_on_cluster else {}
        audit.record(
            organization, membership.user, "application.delete", "application", name, detail
        )


def left_on_cluster(application: Application) -> str:
    """What a delete that could not reach the cluster leaves there, in words for the user."""
    namespace = application.manifest["spec"].get("namespace") or application.profile.namespace
    try:
        objects = render_for_profile(application.manifest, application.profile)
    except RenderError:
        objects = []
    names = [
        f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
        for obj in objects
        if isinstance(obj, dict)
    ]
    what = ", ".join(names) if names else f"the objects labelled {APP_LABEL}={application.name}"
    return (
        f"{application.name} is deleted from the console; cluster "
        f"{application.profile.cluster.name} was unavailable, so it may still hold {what} in "
        f"namespace {namespace} (and their storage). Delete them there when the cluster is "
        f"back: they carry the label {APP_LABEL}={application.name}."
    )


@dataclass
class Rendered:
    dry_run: DryRun
    profile: Profile
    objects: list


def render(doc, membership) -> Rendered:
    """Like `helm template`: the objects a manifest renders into for its profile, on a
    Kubernetes cluster with the same machine catalog even when the profile runs on the local
    backend. A dry run, so a deployer's; raises Refused (its problems) or RenderError."""
    membership = as_deployer(membership).membership
    run = dry_run(doc, membership.organization)
    if not run.ok:
        raise Refused(run)
    profile = get_profile(membership, run.manifest["spec"]["profileName"])
    # A Kubernetes profile's dry run rendered them already; a local profile's did not.
    return Rendered(run, profile, run.objects or render_for_profile(run.manifest, profile))


MAX_LOG_LINES = 1000


def logs(application: Application, lines: int = 100, replica: int = 0, after: str | None = None):
    """One replica's model server log, bounded and redacted as the overview's log tail is
    (replica_logs): the last `lines` lines, or with `after` (a cursor an earlier answer gave)
    the lines written since; a replica_logs.Tail with the cursor to go on from. The process's
    log on this machine, the n-th pod's log on a cluster."""
    from jobs.overview import replica_logs

    lines = max(1, min(lines, MAX_LOG_LINES))
    try:
        cluster = application.profile.cluster
        if cluster.backend == cluster.Backend.LOCAL:
            return replica_logs.follow(application, str(replica), lines, after)
        pods = replica_logs.replicas(application)
        if not 0 <= replica < len(pods):
            raise ActionError(
                "replica",
                f"{application.name} has {len(pods)} replica pods (0 to "
                f"{max(len(pods) - 1, 0)}); ask for one of those.",
            )
        return replica_logs.follow(application, pods[replica].key, lines, after)
    except replica_logs.LogsRefused as exc:
        field, _, message = str(exc).partition(": ")
        raise ActionError(field, message) from exc
    except replica_logs.LogsUnavailable as exc:
        raise ActionError(application.name, str(exc), status=503) from exc
