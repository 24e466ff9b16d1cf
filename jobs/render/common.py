"""Small pieces every renderer shares: our labels and annotations, object metadata, quantity
text, and the error raised for a manifest that was not filled in by manifest.parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.manifest.quantity import format_cpu, parse_quantity

APP_LABEL = "servedeck.io/application"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "servedeck"
# Application names are unique per namespace only, so a cluster-scoped object says which.
NAMESPACE_LABEL = "servedeck.io/namespace"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REVISION_ANNOTATION = "servedeck.io/revision"
# Whose application an object is: organisations may share a cluster and a namespace. The
# label is what selectors use; the annotation names the organisation for people.
ORGANIZATION_LABEL = "servedeck.io/organization"
ORGANIZATION_ANNOTATION = "servedeck.io/organization-name"

KSERVE_API = "serving.kserve.io/v1beta1"
KSERVE_ALPHA_API = "serving.kserve.io/v1alpha1"


class RenderError(ValueError):
    """The manifest cannot be rendered: it was not filled in by manifest.parse, or asks for
    something this renderer does not make. The message says what and what to do."""


def our_labels(name: str) -> dict[str, str]:
    return {APP_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY}


def metadata(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """ObjectMeta in the order kubectl prints it; namespace None for cluster-scoped objects."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def revision_annotation(revision: int | None) -> dict[str, str]:
    """servedeck.io/revision: the deploy history number the objects were rendered for."""
    if revision is None:
        return {}
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise RenderError(f"revision {revision!r} is not a revision number; accepts 1 or more")
    return {REVISION_ANNOTATION: str(revision)}


def quantity_text(value: Any) -> str:
    """A manifest quantity as Kubernetes text: strings stay as the user wrote them (already
    checked by manifest.parse); numbers from YAML become their exact decimal."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RenderError(f"{value!r} is not a quantity; parse the manifest first")
    amount = parse_quantity(value)
    if amount.denominator == 1:
        return str(amount.numerator)
    if (amount * 1000).denominator == 1:
        return format_cpu(amount)
    return repr(float(value))


def number_text(value: float) -> str:
    """A plain number for an argument or a metric target: 2 -> "2", 2.0 -> "2", 2.5 -> "2.5"."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)
