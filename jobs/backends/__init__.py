"""Cluster backends: how a profile's cluster runs what a revision describes.

`backend_for(profile)` answers an object with one interface whatever the cluster:
preflight (the dry run's checks on the target), apply, restart, stop, start, delete, observe.
"""

import threading

from django.conf import settings

from jobs.backends.base import BackendFailed, Preflight
from jobs.backends.local import LocalRefused, LocalRunner, UnknownApplication
from jobs.lifecycle import Observed


class LocalBackend:
    """Model servers as processes on this machine (the embedded default)."""

    def __init__(self, runner: LocalRunner):
        self.runner = runner

    def preflight(self, manifest: dict, objects: list) -> Preflight:
        return Preflight(refusals=self.runner.check(manifest), warnings=[])

    def apply(self, application, revision) -> Observed:
        try:
            status = self.runner.apply(application.name, revision.manifest, revision.number)
        except LocalRefused as refused:
            raise BackendFailed(
                " ".join(refused.refusals), "Fix the manifest or the machine, then deploy again."
            ) from None
        return Observed.of(status)

    def _on_existing(self, verb: str, application) -> Observed:
        try:
            return Observed.of(getattr(self.runner, verb)(application.name))
        except UnknownApplication:
            raise BackendFailed(
                f"{application.name} has no model server on this machine to {verb}.",
                "Deploy it first.",
            ) from None

    def restart(self, application) -> Observed:
        return self._on_existing("restart", application)

    def stop(self, application) -> Observed:
        return self._on_existing("stop", application)

    def start(self, application) -> Observed:
        return self._on_existing("start", application)

    def delete(self, application) -> None:
        self.runner.delete(application.name)

    def observe(self, application) -> Observed:
        return Observed.of(self.runner.observe(application.name))


_local_lock = threading.Lock()
_local_runner: LocalRunner | None = None


def local_runner() -> LocalRunner:
    """One runner per process; the web process and the reconciler share its state folder."""
    global _local_runner
    with _local_lock:
        if _local_runner is None:
            state = settings.SERVEDECK_LOCAL_STATE_DIR
            state.mkdir(parents=True, exist_ok=True)
            _local_runner = LocalRunner(state)
        return _local_runner


def forget_local_runner() -> None:
    """Stop every local server this process started and forget the runner (tests, shutdown)."""
    global _local_runner
    with _local_lock:
        if _local_runner is not None:
            _local_runner.shutdown()
        _local_runner = None


__all__ = ["BackendFailed", "Preflight", "backend_for", "forget_local_runner", "local_runner"]


def backend_for(profile):
    """The backend that runs `profile`'s cluster."""
    cluster = profile.cluster
    if cluster.backend == cluster.Backend.LOCAL:
        return LocalBackend(local_runner())
    from jobs.backends.cluster import ClusterBackend  # the client loads only when needed

    return ClusterBackend(profile)
