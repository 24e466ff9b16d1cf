"""How an application is shown to clients: the API and the command line print the same shapes."""

from jobs.manifest import scaling_of
from jobs.models import Application
from jobs.reconciler.sleeping import wake_summary


def summary(app: Application) -> dict:
    return {
        "name": app.name,
        "phase": app.phase,
        "profile": app.profile.name,
        "model": app.model_uri,
        "readyReplicas": app.ready_replicas,
        "desiredReplicas": app.desired_replicas,
        "endpoint": app.endpoint,
        "deployedAt": app.deployed_at,
    }


def history(app: Application) -> list[dict]:
    """The deploy history, newest first, as the API and `app history` show it."""
    return [
        {
            "number": r.number,
            "createdAt": r.created_at,
            "createdBy": r.created_by.get_username() if r.created_by else None,
            "outcome": r.outcome,
            "message": r.message,
            "rolledBackFrom": r.rolled_back_from,
            "release": r.release,
            "manifest": r.manifest,
        }
        for r in app.revisions.select_related("created_by")
    ]


def rollout_body(rollout) -> dict | None:
    """A Canary rollout as the API and `app promote|abort` show it (None: there is none)."""
    if rollout is None:
        return None
    return {
        "state": rollout.state,
        "stableRevision": rollout.stable_revision,
        "canaryRevision": rollout.canary_revision,
        "weight": rollout.weight,
        "step": rollout.step + 1,
        "steps": list(rollout.plan.get("steps", [])),
        "stepStartedAt": rollout.step_started_at,
        "canaryPhase": rollout.canary_phase,
        "decisions": list(rollout.decisions),
    }


def described(app: Application) -> dict:
    """The filled-in manifest with a read-only status block; applying it back changes nothing."""
    latest = app.revisions.order_by("-number").values_list("number", flat=True).first()
    status = {
        "phase": app.phase,
        "reason": app.reason,
        "nextStep": app.next_step,
        "endpoint": app.endpoint,
        "readyReplicas": app.ready_replicas,
        "desiredReplicas": app.desired_replicas,
        "revision": latest,
        "createdAt": app.created_at.isoformat(),
        "deployedAt": app.deployed_at.isoformat() if app.deployed_at else None,
        "scaling": scaling_of(app.manifest),
    }
    wakes = wake_summary(app)
    if wakes is not None:  # a model that sleeps (minReplicas 0): its wakes from sleep
        status["wakes"] = {
            "count": wakes["count"],
            "p50": wakes["p50"] or None,
            "p95": wakes["p95"] or None,
        }
    # In the API's order whatever the database kept (PostgreSQL's jsonb orders keys its own way).
    top = {key: app.manifest[key] for key in ("apiVersion", "kind", "spec") if key in app.manifest}
    return {**top, **app.manifest, "status": status}


def local_profile_note(profile_name: str) -> str:
    """What a profile on the local backend does with Kubernetes objects, said the same by the
    wizard's Review and by `app render`: Deploy applies none; render shows what a cluster would
    get, for reference."""
    return (
        f"Profile {profile_name} runs on this machine: Deploy starts the model server as a "
        "process and applies nothing to Kubernetes. app render prints the KServe objects the "
        "same manifest would get on a Kubernetes cluster with this profile's machine catalog, "
        "for reference only."
    )


def dry_run_body(run) -> dict:
    """A dry run (jobs.dry_run.DryRun) as every surface shows it: the API's `?dryRun=true`
    answer, `app apply --dry-run -o json|yaml`, and the data of the wizard's Review step."""
    return {
        "ok": run.ok,
        "action": run.action,
        "refusals": [p.as_dict() for p in run.refusals],
        "warnings": [p.as_dict() for p in run.warnings],
        "runtime": run.runtime,
        "scaling": run.scaling,
        "sleeping": run.sleeping or None,
        "checkModel": run.check.as_dict() if run.check else None,
        "objects": run.objects,
        "manifest": run.manifest,
    }
