"""The backend contract: what every backend answers with (Observed, a status in the words of
Application's fields; Preflight, its answers to a dry run; BackendFailed) and what it does
(Backend). Imports nothing of the backends, so they and their callers all stand on it."""

from dataclasses import dataclass, field
from typing import Protocol

from jobs.manifest.problems import Level, Problem

# Where a target's answer is said: the target is the profile's (its cluster, or this machine).
TARGET_PATH = "spec.profileName"


# The Application fields a status is saved into (jobs.lifecycle.record_status).
STATUS_FIELDS = (
    "phase",
    "reason",
    "next_step",
    "endpoint",
    "ready_replicas",
    "desired_replicas",
    "runtime",
)
# Saved beside them, but not said to live pages (addresses inside the cluster).
REPLICAS_FIELD = "replica_endpoints"


@dataclass(frozen=True)
class Observed:
    """A status in the words of Application's fields, whoever observed it."""

    phase: str
    reason: str = ""
    next_step: str = ""
    endpoint: str = ""
    ready_replicas: int = 0
    desired_replicas: int = 0
    runtime: str = ""  # the model server the backend runs, when it says (the local one does)
    # The base URL of each ready replica, for the gateway to route across; None when this
    # observer does not see them (a Kubernetes verb: the reconciler's EndpointSlice watch does),
    # and then what was saved stays.
    replica_endpoints: tuple[str, ...] | None = None

    @classmethod
    def of(cls, status) -> "Observed":
        defaults = cls(phase="")
        fields = {name: getattr(status, name, getattr(defaults, name)) for name in STATUS_FIELDS}
        endpoints = getattr(status, REPLICAS_FIELD, None)
        return cls(**fields, replica_endpoints=None if endpoints is None else tuple(endpoints))


class BackendFailed(Exception):
    """The backend could not do what was asked; the reason and next step are for the user.
    `unavailable` when the cluster did not answer at all: nothing is wrong with the request."""

    def __init__(self, reason: str, next_step: str, *, unavailable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.next_step = next_step
        self.unavailable = unavailable


def target_answer(message: str, about: str = "", level: Level = "refusal") -> Problem:
    """One answer of the profile's target, said at the profile and about the manifest field
    `about` names (empty: about no field in particular, such as the cluster refusing an
    object). The backend that answers names the field; nobody reads it back from the text."""
    return Problem(TARGET_PATH, message, level, "target", about)


@dataclass(frozen=True)
class Preflight:
    """The target's answers to a dry run: Problems of origin target (see target_answer)."""

    refusals: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


class Backend(Protocol):
    """What a profile's cluster does with an application (jobs.backends.backend_for).

    A backend may also have `sleep` and `wake` (scale to zero, minReplicas 0: the Kubernetes
    one scales the predictor to zero and back); jobs.reconciler.sleeping stops and starts the
    application on a backend without them (the local one: its processes end)."""

    def preflight(self, manifest: dict, objects: list) -> Preflight: ...

    def apply(self, application, revision, objects: list | None = None) -> Observed:
        """Run `revision`. `objects`: what the dry run of its manifest rendered for this
        profile (no revision stamp), when the caller made one; a backend that renders uses
        them instead of rendering the manifest again."""
        ...

    def restart(self, application) -> Observed: ...

    def stop(self, application) -> Observed: ...

    def start(self, application) -> Observed: ...

    def delete(self, application) -> None: ...

    def observe(self, application) -> Observed: ...
