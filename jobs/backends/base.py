"""What every backend answers with."""

from dataclasses import dataclass


class BackendFailed(Exception):
    """The backend could not do what was asked; the reason and next step are for the user."""

    def __init__(self, reason: str, next_step: str):
        super().__init__(reason)
        self.reason = reason
        self.next_step = next_step


@dataclass(frozen=True)
class Preflight:
    refusals: list
    warnings: list
