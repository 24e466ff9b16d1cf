"""Whose an object on the cluster is. Organisations may share a cluster and a namespace, so
every verb of the Kubernetes backend first checks that an existing object carries this
application's labels (servedeck.io/application and servedeck.io/organization); pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.render.common import APP_LABEL, ORGANIZATION_ANNOTATION, ORGANIZATION_LABEL

from .errors import BackendError

SHOWN_CHARACTERS = 100


class NotOurs(BackendError):
    """An object with the name ServeDeck would use belongs to someone else: left alone."""

    def __init__(self, reason: str, next_step: str) -> None:
        super().__init__(reason, next_step, status=409)


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"


def is_ours(obj: Mapping[str, Any], app: str, organization: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(APP_LABEL) == app and labels.get(ORGANIZATION_LABEL) == organization


def not_ours(
    what: str, obj: Mapping[str, Any], app: str, organization: str, kubectl: str
) -> NotOurs | None:
    """None when `obj` is this application's; else the refusal, saying whose it is.
    `what` names the object ("InferenceService models/llama"), `kubectl` its kubectl words
    ("-n models inferenceservice llama")."""
    if is_ours(obj, app, organization):
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    their_app, their_org = labels.get(APP_LABEL), labels.get(ORGANIZATION_LABEL)
    elsewhere = (
        "Pick another application name, or deploy it to a namespace of your own "
        "(spec.namespace, among the profile's namespaces)."
    )
    if their_app is None:
        return NotOurs(
            f"{what} exists on the cluster and was not created by ServeDeck; ServeDeck leaves "
            "it alone",
            f"{elsewhere} Or remove that object, if nothing uses it.",
        )
    if their_org is None:
        return NotOurs(
            f"{what} was made by ServeDeck for application {_shown(their_app)} without an "
            "organisation label (by an earlier version); ServeDeck does not know whose it is "
            "and leaves it alone",
            f"If it is {organization}'s application {app}, label it: kubectl label {kubectl} "
            f"{ORGANIZATION_LABEL}={organization}. Otherwise: {elsewhere}",
        )
    name = (meta.get("annotations") or {}).get(ORGANIZATION_ANNOTATION) or their_org
    return NotOurs(
        f"{what} belongs to organisation {_shown(name)}'s application {_shown(their_app)}; "
        "ServeDeck never changes another application's objects",
        elsewhere,
    )
