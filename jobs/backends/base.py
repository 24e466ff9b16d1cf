"""What every backend answers with."""

from dataclasses import dataclass, field

from jobs.manifest.problems import Level, Problem

# Where a target's answer is said: the target is the profile's (its cluster, or this machine).
TARGET_PATH = "spec.profileName"


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
