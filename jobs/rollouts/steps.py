"""What a Canary rollout does, step by step: start the canary beside the stable revision (from
jobs.deploy.deploy), the reconciler's `advance` at each pass (observe the canary, start its first
step once it serves, judge each step at its end), and the decisions, by the judge or by hand:
promote (to the next step, or to 100%: the stable replicas then become the new revision) and
roll back or abort (the canary stops, the stable revision takes every request).

All state is in the Rollout row: a restarted gateway reads the split from it, a restarted
reconciler the step and when it began. `now` is passed in, so tests drive the judge's clock.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accesspolicies import audit
from jobs.backends import backend_for
from jobs.backends.base import BackendFailed
from jobs.lifecycle import announce, record_status
from jobs.manifest.rollout import RolloutPlan, plan_of
from jobs.models import Application, Event, Phase, Revision, Rollout
from jobs.rollouts.figures import revision_figures
from jobs.rollouts.judge import PROMOTE, ROLL_BACK, WAIT, Limits, judge, next_weight

logger = logging.getLogger(__name__)

# After a rollout ends, the gateway processes stop sending the canary requests at their next
# reload (about a second); its replicas are stopped this long after, so none is cut short.
DRAIN_SECONDS = 5
# Release marks on revisions (deploy history).
CANARY, PROMOTED, ROLLED_BACK, ABORTED = "Canary", "Promoted", "Rolled back", "Aborted"


class RolloutError(Exception):
    """A decision by hand that cannot be taken now; says why and what to do."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.message = message
        self.status = status


def active_rollout(application: Application) -> Rollout | None:
    return application.rollouts.filter(state__in=Rollout.ACTIVE).first()


def _serves_canaries(application: Application) -> bool:
    return hasattr(backend_for(application.profile), "apply_canary")


def stable_revision(application: Application, revision: Revision) -> Revision | None:
    """The revision serving now, which a canary of `revision` would be judged against: the
    latest applied one before it that a rollout did not take back."""
    return (
        application.revisions.filter(number__lt=revision.number, outcome=Revision.Outcome.APPLIED)
        .exclude(release__in=(CANARY, ROLLED_BACK, ABORTED))
        .order_by("-number")
        .first()
    )


def wants_canary(application: Application, revision: Revision) -> Revision | None:
    """The stable revision when `revision` is to be rolled out as a canary: its manifest says
    Canary, the application serves (Running) a revision before it, and its backend runs
    canaries. None: replace as before."""
    if not plan_of(revision.manifest).canary or application.phase != Phase.RUNNING:
        return None
    if not _serves_canaries(application):
        return None
    return stable_revision(application, revision)


def _decision(rollout: Rollout, decision: str, by: str, reason: str, figures=None, now=None):
    rollout.decisions = [
        *rollout.decisions,
        {
            "at": (now or timezone.now()).isoformat(),
            "step": rollout.step + 1,
            "weight": rollout.weight,
            "decision": decision,
            "by": by,
            "reason": reason,
            "figures": figures or {},
        },
    ][-100:]


def start(application: Application, revision: Revision, stable: Revision) -> Rollout:
    """Start `revision`'s replicas beside `stable`'s; it takes no request until they serve."""
    plan = plan_of(revision.manifest)
    rollout = Rollout.objects.create(
        application=application,
        stable_revision=stable.number,
        canary_revision=revision.number,
        plan=plan.as_dict(),
    )
    try:
        observed = backend_for(application.profile).apply_canary(application, revision)
    except BackendFailed as failure:
        _end(rollout, Rollout.State.ROLLED_BACK, "system", f"{failure.reason}", {})
        raise
    rollout.canary_phase, rollout.canary_reason = observed.phase, observed.reason
    rollout.canary_endpoints = list(observed.replica_endpoints or ())
    _decision(
        rollout,
        "start",
        "system",
        f"revision {revision.number} starts beside revision {stable.number}; steps "
        f"{', '.join(f'{s}%' for s in plan.steps)}, then 100%, each judged after "
        f"{plan.step_seconds} s.",
    )
    rollout.save()
    with transaction.atomic():
        Revision.objects.filter(pk=revision.pk).update(release=CANARY)
        Event.objects.create(
            application=application,
            reason="CanaryStarted",
            message=f"Revision {revision.number} starts as a canary beside revision "
            f"{stable.number}; it takes {plan.steps[0]}% of the requests once it serves.",
        )
        announce(application)
    return rollout


# --- the reconciler's pass ---------------------------------------------------------------------


def advance_all(now: datetime | None = None) -> None:
    """One pass over every active rollout, and the canaries of ended ones to stop."""
    now = now or timezone.now()
    for rollout in Rollout.objects.filter(state__in=Rollout.ACTIVE).select_related(
        "application__profile__cluster", "application__organization"
    ):
        try:
            advance(rollout, now)
        except Exception:  # one rollout's trouble must not stop the others
            logger.exception("rollout of %s: the step failed", rollout.application.name)
    for rollout in (
        Rollout.objects.filter(canary_removed=False)
        .exclude(state__in=Rollout.ACTIVE)
        .select_related("application__profile__cluster", "application__organization")
    ):
        if rollout.finished_at and now >= rollout.finished_at + timedelta(seconds=DRAIN_SECONDS):
            try:
                backend_for(rollout.application.profile).remove_canary(rollout.application)
            except Exception:
                logger.exception("rollout of %s: the canary not stopped", rollout.application.name)
                continue
            Rollout.objects.filter(pk=rollout.pk).update(canary_removed=True)


def advance(rollout: Rollout, now: datetime) -> None:
    application = rollout.application
    plan = RolloutPlan.of_dict(rollout.plan)
    if rollout.state == Rollout.State.PROMOTING:
        _replace_stable(rollout, now)
        return
    observed = backend_for(application.profile).observe_canary(application)
    endpoints = list(observed.replica_endpoints or ())
    seen = (observed.phase, observed.reason, endpoints)
    changed = seen != (rollout.canary_phase, rollout.canary_reason, rollout.canary_endpoints)
    rollout.canary_phase, rollout.canary_reason, rollout.canary_endpoints = seen
    if observed.phase == Phase.FAILED:
        reason = f"revision {rollout.canary_revision} failed: {observed.reason}"
        _end(rollout, Rollout.State.ROLLED_BACK, "system", reason, {}, now=now)
        return
    if rollout.state == Rollout.State.STARTING:
        if observed.phase == Phase.RUNNING and endpoints:
            rollout.state = Rollout.State.PROGRESSING
            rollout.step, rollout.weight, rollout.step_started_at = 0, plan.steps[0], now
            _decision(rollout, "step", "system", f"step 1: {plan.steps[0]}%.", now=now)
            rollout.save()
            announce(application)
        elif changed:
            rollout.save()
        return
    due = rollout.step_started_at + timedelta(seconds=plan.step_seconds)
    if now < due:
        if changed:
            rollout.save()
        return
    judge_step(rollout, plan, now)


def judge_step(rollout: Rollout, plan: RolloutPlan, now: datetime) -> str:
    """Judge the step that is due: wait, the next step, 100%, or roll back."""
    found = revision_figures(
        rollout.application_id,
        (rollout.stable_revision, rollout.canary_revision),
        rollout.step_started_at,
    )
    limits = Limits(plan.max_error_rate_increase, plan.max_latency_increase, plan.min_requests)
    verdict = judge(found[rollout.stable_revision], found[rollout.canary_revision], limits)
    if verdict.decision == WAIT:
        last = rollout.decisions[-1] if rollout.decisions else {}
        if last.get("decision") != WAIT or last.get("step") != rollout.step + 1:
            _decision(rollout, WAIT, "judge", verdict.reason, verdict.figures, now=now)
        else:  # the latest figures, not one more entry per pass
            last.update(reason=verdict.reason, figures=verdict.figures, at=now.isoformat())
        rollout.save(update_fields=["decisions"])  # the split is unchanged: no gateway reload
        announce(rollout.application)
        return WAIT
    if verdict.decision == ROLL_BACK:
        _end(rollout, Rollout.State.ROLLED_BACK, "judge", verdict.reason, verdict.figures, now)
        return ROLL_BACK
    assert verdict.decision == PROMOTE
    _promote(rollout, plan, "judge", verdict.reason, verdict.figures, now)
    return PROMOTE


# --- the decisions -----------------------------------------------------------------------------


def _promote(rollout, plan: RolloutPlan, by: str, reason: str, figures, now, *, user=None):
    weight = next_weight(plan.steps, rollout.step)
    _decision(rollout, PROMOTE, by, reason, figures, now=now)
    application = rollout.application
    if weight < 100:
        rollout.step, rollout.weight, rollout.step_started_at = rollout.step + 1, weight, now
        rollout.save()
        Event.objects.create(
            application=application,
            reason="CanaryStep",
            message=f"Revision {rollout.canary_revision} takes {weight}% of the requests "
            f"(step {rollout.step + 1}), by {by}: {reason}",
        )
        _audit(application, user, "application.promote", rollout, figures, weight=weight)
        announce(application)
        return
    _promote_fully(rollout, by, reason, figures, now, user=user)


def _promote_fully(rollout, by: str, reason: str, figures, now, *, user=None):
    """Every request to the canary while the stable replicas are replaced by its revision (the
    old revision stops: _replace_stable, once the gateways have moved every request)."""
    application = rollout.application
    rollout.state, rollout.weight, rollout.step_started_at = Rollout.State.PROMOTING, 100, now
    rollout.save()
    revision = application.revisions.get(number=rollout.canary_revision)
    Revision.objects.filter(pk=revision.pk).update(release=PROMOTED)
    Event.objects.create(
        application=application,
        reason="Promoted",
        message=f"Revision {rollout.canary_revision} is promoted to every request, by {by}"
        + (f": {reason}" if reason else ".")
        + f" Revision {rollout.stable_revision} stops.",
    )
    _audit(application, user, "application.promote", rollout, figures, weight=100)
    announce(application)


def _replace_stable(rollout: Rollout, now: datetime) -> None:
    """Promoting: DRAIN_SECONDS after every gateway was told to send every request to the
    canary, the stable replicas are replaced by the canary's revision (the old revision
    stops); the rollout is done when they serve."""
    application = rollout.application
    if not rollout.stable_replaced:
        if now < rollout.step_started_at + timedelta(seconds=DRAIN_SECONDS):
            return
        revision = application.revisions.get(number=rollout.canary_revision)
        observed = backend_for(application.profile).apply(application, revision)
        rollout.stable_replaced = True
        rollout.save(update_fields=["stable_replaced"])
        record_status(application, observed)
        return
    application.refresh_from_db()
    if application.phase == Phase.RUNNING and application.ready_replicas:
        _end(rollout, Rollout.State.PROMOTED, "system", "", {}, now=now)


def _end(rollout, state, by: str, reason: str, figures, now=None, *, user=None):
    """The rollout ends: Promoted (the stable replicas run the canary's revision now), rolled
    back or aborted (the stable revision takes every request; the application's manifest is
    its again). The canary's replicas stop after DRAIN_SECONDS (advance_all)."""
    now = now or timezone.now()
    application = rollout.application
    rollout.state, rollout.finished_at = state, now
    if state != Rollout.State.PROMOTED:
        rollout.weight = 0
    if state == Rollout.State.PROMOTED:
        reason = "the promoted revision serves every request."
    decision = {Rollout.State.ROLLED_BACK: ROLL_BACK, Rollout.State.ABORTED: "abort"}
    _decision(rollout, decision.get(state, "done"), by, reason, figures, now=now)
    with transaction.atomic():
        rollout.save()
        if state == Rollout.State.PROMOTED:
            Event.objects.create(
                application=application,
                reason="RolloutDone",
                message=f"Revision {rollout.canary_revision} serves every request; revision "
                f"{rollout.stable_revision} is stopped.",
            )
        else:
            release = ABORTED if state == Rollout.State.ABORTED else ROLLED_BACK
            application.revisions.filter(number=rollout.canary_revision).update(
                release=release, message=reason[:2000]
            )
            stable = application.revisions.filter(number=rollout.stable_revision).first()
            if stable is not None:
                application.manifest = stable.manifest
                application.updated_at = now
                application.save(update_fields=["manifest", "updated_at"])
            what = "aborted" if state == Rollout.State.ABORTED else "rolled back"
            Event.objects.create(
                application=application,
                kind=Event.Kind.WARNING,
                reason="Aborted" if state == Rollout.State.ABORTED else "CanaryRolledBack",
                message=f"Revision {rollout.canary_revision} is {what} by {by}"
                + (f": {reason}" if reason else ".")
                + f" Revision {rollout.stable_revision} takes every request.",
            )
            aborted = state == Rollout.State.ABORTED
            action = "application.abort" if aborted else "application.rollback"
            _audit(
                application, user, action, rollout, figures, reason=reason, automatic=by != "user"
            )
        announce(application)


def _audit(application, user, action: str, rollout: Rollout, figures, **more) -> None:
    detail = {
        "revision": rollout.canary_revision,
        "stable": rollout.stable_revision,
        "figures": figures or {},
        **more,
    }
    audit.record(application.organization, user, action, "application", application.name, detail)


# --- by hand -----------------------------------------------------------------------------------


def _require_active(application: Application, verb: str) -> Rollout:
    rollout = active_rollout(application)
    if rollout is None:
        raise RolloutError(
            f"{application.name} has no Canary rollout under way, so there is nothing to "
            f"{verb}; a deploy of a manifest with spec.rollout.strategy Canary starts one."
        )
    return rollout


def promote(application: Application, user, now: datetime | None = None) -> Rollout:
    """Promote the canary to every request now (the steps left are skipped)."""
    rollout = _require_active(application, "promote")
    if rollout.state == Rollout.State.PROMOTING:
        raise RolloutError(
            f"revision {rollout.canary_revision} of {application.name} is being promoted "
            "already; wait for it to serve every request."
        )
    if not rollout.canary_endpoints or rollout.canary_phase != Phase.RUNNING:
        raise RolloutError(
            f"revision {rollout.canary_revision} of {application.name} is not serving yet "
            f"(canary {rollout.canary_phase or 'Pending'}); promote it once it is Running, or "
            "abort it."
        )
    plan = RolloutPlan.of_dict(rollout.plan)
    rollout.step = len(plan.steps) - 1  # the next weight is 100
    _promote(rollout, plan, "user", f"promoted by {user}", {}, now or timezone.now(), user=user)
    return rollout


def abort(application: Application, user, now: datetime | None = None) -> Rollout:
    """Stop the canary; the stable revision takes every request."""
    rollout = _require_active(application, "abort")
    if rollout.state == Rollout.State.PROMOTING:
        raise RolloutError(
            f"revision {rollout.canary_revision} of {application.name} is being promoted: its "
            "revision replaces the stable replicas already. Roll back to revision "
            f"{rollout.stable_revision} once it is done (app rollback)."
        )
    _end(rollout, Rollout.State.ABORTED, "user", f"aborted by {user}", {}, now, user=user)
    return rollout
