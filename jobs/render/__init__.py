"""Kubernetes objects from a filled-in Application manifest (the KServe renderer; the KubeVirt
one, kubevirt.py, for runtime.isolation VirtualMachine), and the check of those objects against
KServe's real CRD schemas and KubeVirt's OpenAPI definitions before the cluster sees them.

    objects = render(parse(doc, ctx).manifest, RenderTarget.from_profile(profile), revision=3)
    problems = validate(objects)        # [] when the cluster would take them
    text = to_yaml(objects)             # multi-document YAML for kubectl apply -f

render() is pure and deterministic; validate() reads the CRDs from KSERVE_CRD_DIR and KubeVirt's
definitions from KUBEVIRT_OPENAPI.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .build import render, with_revision
from .canary import render_canary
from .common import APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, REVISION_ANNOTATION, RenderError
from .output import to_json, to_yaml
from .scaling import SLEEPING_ANNOTATION
from .schemas import CRD_DIR_SETTING, CrdDirError, crd_dir
from .target import PARAKEET_IMAGE, PROFILE_DEFAULT_KEYS, RenderTarget
from .validate import validate


def render_for_profile(
    manifest: Mapping[str, Any],
    profile: Any,
    *,
    revision: int | None = None,
    asleep: bool = False,
) -> list[dict[str, Any]]:
    """render() for a jobs.models.Profile: what `manage.py app render` prints."""
    return render(manifest, RenderTarget.from_profile(profile), revision=revision, asleep=asleep)


def render_canary_for_profile(
    manifest: Mapping[str, Any], profile: Any, *, revision: int | None = None
) -> list[dict[str, Any]]:
    """render_canary() for a jobs.models.Profile: a Canary rollout's second InferenceService."""
    return render_canary(manifest, RenderTarget.from_profile(profile), revision=revision)


__all__ = [
    "APP_LABEL",
    "CRD_DIR_SETTING",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "PARAKEET_IMAGE",
    "PROFILE_DEFAULT_KEYS",
    "REVISION_ANNOTATION",
    "CrdDirError",
    "RenderError",
    "RenderTarget",
    "SLEEPING_ANNOTATION",
    "crd_dir",
    "render",
    "render_canary",
    "render_canary_for_profile",
    "render_for_profile",
    "to_json",
    "to_yaml",
    "validate",
    "with_revision",
]
