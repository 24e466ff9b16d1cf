"""The local backend's errors: a manifest this machine cannot run, an application it holds no
state for, a state file it cannot read."""


class LocalRefused(Exception):
    """This machine cannot run the manifest; `refusals` says why, in plain words."""

    def __init__(self, refusals: list[str]) -> None:
        super().__init__(" ".join(refusals))
        self.refusals = refusals


class UnknownApplication(LookupError):
    """No local state for this application: it was never applied here, or was deleted."""


class LocalStateError(ValueError):
    """A state file that cannot be read; the message names it."""
