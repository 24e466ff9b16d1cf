"""What a model's page shows of its Canary rollout: the split, both revisions' figures side by
side over the current step (from the metering rows, as the judge reads them), the decisions."""

from __future__ import annotations

from datetime import datetime

from django.utils.dateparse import parse_datetime

from jobs.models import Application, Rollout
from jobs.rollouts.figures import revision_figures

DECISIONS_SHOWN = 20


def rollout_view(application: Application) -> dict | None:
    rollout = application.rollouts.order_by("-created_at", "-id").first()
    if rollout is None:
        return None
    since = rollout.step_started_at or rollout.created_at
    found = revision_figures(
        application.pk, (rollout.stable_revision, rollout.canary_revision), since
    )
    stable, canary = found[rollout.stable_revision].shown(), found[rollout.canary_revision].shown()
    steps = list(rollout.plan.get("steps", []))
    decisions = []
    for entry in reversed(rollout.decisions[-DECISIONS_SHOWN:]):
        at = parse_datetime(entry.get("at") or "")
        decisions.append({**entry, "at": at if isinstance(at, datetime) else None})
    return {
        "rollout": rollout,
        "active": rollout.state in Rollout.ACTIVE,
        "stable_weight": 100 - rollout.weight,
        "steps": [*steps, 100],
        "since": since,
        "stable": stable,
        "canary": canary,
        "rows": [
            ("Requests", stable["requests"], canary["requests"]),
            ("Server errors", stable["serverErrors"], canary["serverErrors"]),
            ("Error rate", _percent(stable["errorRate"]), _percent(canary["errorRate"])),
            ("p95 latency", _ms(stable["latencyP95Ms"]), _ms(canary["latencyP95Ms"])),
            ("p95 time to first token", _ms(stable["ttftP95Ms"]), _ms(canary["ttftP95Ms"])),
            ("Mean time to first token", _ms(stable["ttftAvgMs"]), _ms(canary["ttftAvgMs"])),
        ],
        "decisions": decisions,
    }


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"
