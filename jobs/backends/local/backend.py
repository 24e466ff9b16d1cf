"""The `local` backend's face to the rest of the product: LocalBackend (the backend
contract over a LocalRunner), and the runners of this process, one per organisation."""

import functools
import threading

from django.conf import settings

from jobs.backends.base import BackendFailed, Observed, Preflight
from jobs.backends.local.machine_check import list_gpus
from jobs.backends.local.processes import private_dir
from jobs.backends.local.runner import LocalRefused, LocalRunner, UnknownApplication
from jobs.models import Application
from jobs.storage_access import ANONYMOUS, Credentials, profile_credentials
from jobs.token_refs import profile_token


class LocalBackend:
    """Model servers as processes on this machine (the embedded default)."""

    def __init__(self, runner: LocalRunner, profile=None):
        self.runner = runner
        self.profile = profile

    def preflight(self, manifest: dict, objects: list) -> Preflight:
        # The runner's check reads the engine arguments as vLLM will (local/command.py), and
        # an hf:// model a CPU runtime serves with the profile's token, as Check model does.
        token = profile_token(self.profile) if self.profile is not None else None
        storage = profile_storage(self.profile) if self.profile is not None else ANONYMOUS
        return Preflight(refusals=self.runner.check(manifest, token, storage))

    def gpus_here(self) -> int:
        """The NVIDIA GPUs this machine has (none when none can be listed): the most one
        application's replicas can be given, whatever the other applications hold."""
        gpus, _ = list_gpus()
        return len(gpus)

    def apply(self, application, revision, objects: list | None = None) -> Observed:
        # The runner starts processes from the manifest: no Kubernetes objects here.
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
        except LocalRefused as refused:
            raise BackendFailed(
                " ".join(refused.refusals), "Fix the manifest or the machine, then deploy again."
            ) from None

    def restart(self, application) -> Observed:
        return self._on_existing("restart", application)

    def stop(self, application) -> Observed:
        return self._on_existing("stop", application)

    def start(self, application) -> Observed:
        return self._on_existing("start", application)

    def delete(self, application) -> None:
        self.runner.delete(application.name)
        if self.profile is not None:  # a Canary rollout's replicas go with it
            self._canary_runner().delete(application.name)

    def observe(self, application) -> Observed:
        return Observed.of(self.runner.observe(application.name))

    # -- a Canary rollout: the canary's replicas beside the stable ones (jobs/rollouts)

    def _canary_runner(self) -> LocalRunner:
        return local_runner(self.profile.organization.slug + CANARY_SUFFIX)

    def apply_canary(self, application, revision) -> Observed:
        """Start `revision`'s replicas beside the running ones, which keep serving."""
        try:
            status = self._canary_runner().apply(
                application.name, revision.manifest, revision.number
            )
        except LocalRefused as refused:
            raise BackendFailed(
                " ".join(refused.refusals), "Fix the manifest or the machine, then deploy again."
            ) from None
        return Observed.of(status)

    def observe_canary(self, application) -> Observed:
        return Observed.of(self._canary_runner().observe(application.name))

    def remove_canary(self, application) -> None:
        self._canary_runner().delete(application.name)


# A Canary rollout's replicas run under a runner of their own, in a state folder beside the
# organisation's ("<slug>~canary": "~" is in no organisation's slug), so the canary has the
# application's own name, and the machine's GPU ledger and downloads are shared.
CANARY_SUFFIX = "~canary"
_local_lock = threading.Lock()
_local_runners: dict[str, LocalRunner] = {}


def local_runner(organization_slug: str) -> LocalRunner:
    """One runner per organisation and process, each with its own state folder: application
    names are unique within an organisation only. The web process and the reconciler share
    the folders."""
    with _local_lock:
        if organization_slug not in _local_runners:
            state = settings.SERVEDECK_LOCAL_STATE_DIR / organization_slug
            private_dir(state)
            organization = organization_slug.removesuffix(CANARY_SUFFIX)
            token_for = functools.partial(application_token, organization)
            storage_for = functools.partial(application_storage, organization)
            _local_runners[organization_slug] = LocalRunner(
                state, token_for=token_for, storage_for=storage_for
            )
        return _local_runners[organization_slug]


def application_token(organization_slug: str, app_name: str) -> str | None:
    """The Hugging Face token a local model server of this application gets: its profile's
    `env/VAR`, read only when the operator allows VAR for the organisation (checked here, at
    each start, so taking a variable back takes effect on the next start)."""
    application = (
        Application.objects.select_related("profile", "organization")
        .filter(organization__slug=organization_slug, name=app_name)
        .first()
    )
    if application is None:
        return None
    return profile_token(application.profile)


def profile_storage(profile) -> Credentials | None:
    """The storage credentials a profile names, checked now (jobs.storage_access)."""
    return profile_credentials(profile, settings.SERVEDECK_MACHINE_CREDENTIALS)


def application_storage(organization_slug: str, app_name: str) -> Credentials | None:
    """The storage credentials an s3:// download of this application reads with: its
    profile's, checked at each start (as application_token)."""
    application = (
        Application.objects.select_related("profile", "organization")
        .filter(organization__slug=organization_slug, name=app_name)
        .first()
    )
    if application is None:
        return ANONYMOUS
    return profile_storage(application.profile)


def local_runners_on_disk() -> list[LocalRunner]:
    """A runner for every organisation that has local state, for the reconciler's start."""
    root = settings.SERVEDECK_LOCAL_STATE_DIR
    slugs = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    return [local_runner(slug) for slug in slugs]


def forget_local_runner() -> None:
    """Stop every local server this process started and forget the runners (tests, shutdown)."""
    with _local_lock:
        for runner in _local_runners.values():
            runner.shutdown()
        _local_runners.clear()
