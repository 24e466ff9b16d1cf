"""What every backend answers with."""

from dataclasses import dataclass


class BackendFailed(Exception):
    """The backend could not do what was asked; the reason and next step are for the user.
    `unavailable` when the cluster did not answer at all: nothing is wrong with the request."""

    def __init__(self, reason: str, next_step: str, *, unavailable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.next_step = next_step
        self.unavailable = unavailable


@dataclass(frozen=True)
class Preflight:
    refusals: list
    warnings: list
