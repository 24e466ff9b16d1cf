"""The phases an application goes through, in a module of their own so that the status
derivation (a pure core) names them without importing the models. `jobs.models.Phase` is this
class; TextChoices is a plain enum with labels, not the ORM."""

from django.db.models.enums import TextChoices


class Phase(TextChoices):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    DOWNLOADING = "Downloading"
    LOADING = "Loading"
    RUNNING = "Running"
    UPDATING = "Updating"
    FAILED = "Failed"
    STOPPED = "Stopped"
    SLEEPING = "Sleeping"  # minReplicas 0, idle: no replica runs; the next request wakes it
    DELETING = "Deleting"


# The steps a model goes through on its way to Running, and the step each phase is on.
STEPS = ("Scheduled", "Downloading weights", "Loading", "Ready")
STEP_OF_PHASE = {
    Phase.PENDING: 0,
    Phase.SCHEDULING: 0,
    Phase.DOWNLOADING: 1,
    Phase.LOADING: 2,
    Phase.UPDATING: 2,  # a new revision's replicas are loading beside the old ones
}


def steps_of(phase: str) -> list[dict[str, str]]:
    """The steps with their state ("done", "current", "todo") while the phase is on the way to
    Running; no steps otherwise (Running, Failed, Stopped, Deleting say enough alone)."""
    current = STEP_OF_PHASE.get(phase)
    if current is None:
        return []
    return [
        {"label": label, "state": "done" if i < current else "current" if i == current else "todo"}
        for i, label in enumerate(STEPS)
    ]


def elapsed_text(seconds: float) -> str:
    """A duration as a person reads it: "8 s", "2 min 5 s", "3 h 10 min"."""
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
