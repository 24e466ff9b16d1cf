"""The first models an organisation with nothing deployed is offered on the dashboard: what the
cards show, and the one-click deploy, which applies the model's shortest manifest through
jobs.deploy.apply like the wizard's Deploy and the REST API."""

from __future__ import annotations

from dataclasses import dataclass

from jobs import deploy as verbs
from jobs import manifest as mf
from jobs.access import as_deployer
from jobs.models import Cluster, Profile
from jobs.wizard import drafts
from jobs.wizard.names import suggest_name
from models_catalog.folders import configured_models_dir
from models_catalog.hub_reach import Reach, hub_reach
from models_catalog.recommended import FIRST_MODELS, FIRST_MODELS_BY_KEY, FirstModel

LOCAL_PROFILE = "local"
# The tries a one-click deploy makes when another request takes the free name first.
NAME_TRIES = 3


class UnknownFirstModel(Exception):
    """The key names no first model (an old or hand-made link)."""


def profile_for_first_models(membership) -> Profile | None:
    """Where a one-click deploy goes: the `local` profile, else the organisation's first
    profile on this machine, else its first profile."""
    found = Profile.objects.for_member(membership).select_related("cluster")
    profiles = list(found.order_by("name"))
    local = [p for p in profiles if p.cluster.backend == Cluster.Backend.LOCAL]
    named = [p for p in profiles if p.name == LOCAL_PROFILE]
    return next(iter(named + local + profiles), None)


def first_manifest(model: FirstModel, name: str, profile: str) -> dict:
    """The shortest manifest of a first model: every other field takes its default."""
    return {
        "apiVersion": mf.API_VERSION,
        "kind": mf.KIND,
        "spec": {
            "name": name,
            "profileName": profile,
            "source": {"type": "Model", "model": {"uri": model.uri}},
        },
    }


def deploy_first_model(membership, key: str) -> verbs.Applied:
    """Deploy the first model `key` under a free name (its repository's, else -2, -3 ...).
    Raises UnknownFirstModel, verbs.Refused (the dry run's refusals) or verbs.ActionError."""
    deployer = as_deployer(membership)  # a viewer's click: 403 whatever the key
    model = FIRST_MODELS_BY_KEY.get(key)
    if model is None:
        raise UnknownFirstModel(key)
    profile = profile_for_first_models(membership)
    if profile is None:
        raise verbs.ActionError(
            "spec.profileName",
            f"{membership.organization} has no profile to deploy to; an organisation admin "
            "creates one under Profiles.",
        )
    repo = model.uri.removeprefix("hf://")
    for attempt in range(NAME_TRIES):
        name = suggest_name(repo, drafts.taken_names(membership.organization))
        doc = first_manifest(model, name, profile.name)
        try:
            return verbs.apply(doc, deployer, create_only=True)  # not decided again
        except verbs.ActionError as error:
            # Another click took the name between the look and the insert: the next is free.
            if error.status != 409 or attempt == NAME_TRIES - 1:
                raise
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class FirstModelsPanel:
    """What the dashboard shows an organisation with no applications."""

    models: tuple[FirstModel, ...]
    may_deploy: bool
    profile: str | None
    hub: Reach
    models_dir: str

    @property
    def offline(self) -> bool:
        return not self.hub.reachable


def first_models_panel(membership) -> FirstModelsPanel:
    """The first models, whether the member may deploy them, and whether the Hub answers (a
    bounded, cached read: see models_catalog.hub_reach)."""
    profile = profile_for_first_models(membership)
    return FirstModelsPanel(
        models=FIRST_MODELS,
        may_deploy=membership.may("deploy"),
        profile=profile.name if profile else None,
        hub=hub_reach(),
        models_dir=str(configured_models_dir()),
    )
