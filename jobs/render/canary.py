"""A Canary rollout's objects on Kubernetes: the new revision rendered as a second
InferenceService `<name>-canary` beside the stable `<name>` (jobs.kube_names), so both serve
at once, each behind its own predictor Service.

Rendered as any revision is (render()), under the canary's name, then made the application's
own again: the application label is its name (deleting the application deletes them), the track
label sets them apart (the stable revision's apply never prunes them, its status never counts
their pods), and the model server is told the application's model name, which the gateway sends
whichever revision answers. No HTTPRoute: a domain's requests reach the console's gateway
through the stable route, and the gateway splits them. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from jobs.kube_names import CANARY_TRACK, TRACK_LABEL, canary_name
from jobs.manifest.rollout import KUBERNETES_CANARY_ENGINES
from jobs.manifest.view import dig

from .build import render
from .common import APP_LABEL, RenderError
from .target import RenderTarget

# The engines whose served model name ServeDeck sets (KServe's Hugging Face server, and the
# parakeet runtime: both read --model_name, the last one given winning, after the runtime's own
# --model_name={{.Name}}, which would name the canary's InferenceService).
NAMED_ENGINES = KUBERNETES_CANARY_ENGINES


def render_canary(
    manifest: Mapping[str, Any], target: RenderTarget, *, revision: int | None = None
) -> list[dict[str, Any]]:
    """The canary's objects for a filled manifest (one render() accepts)."""
    spec = manifest["spec"]
    app = spec["name"]
    engine = dig(spec, "source", "model", "runtime", "engine")
    isolation = dig(spec, "source", "model", "runtime", "isolation")
    if spec["source"].get("type") != "Model" or isolation == "VirtualMachine":
        raise RenderError(
            f"{app}: a canary is rendered for a model ServeDeck serves in containers; "
            "source.type YAML and runtime.isolation VirtualMachine are replaced as a whole"
        )
    if engine not in NAMED_ENGINES:
        raise RenderError(
            f"{app}: a canary on Kubernetes is served under the application's model name, "
            f"which ServeDeck sets for the engines {', '.join(NAMED_ENGINES)}, not {engine}"
        )
    renamed = copy.deepcopy(dict(manifest))
    renamed["spec"] = {**renamed["spec"], "name": canary_name(app)}
    objects = [o for o in render(renamed, target, revision=revision) if o["kind"] != "HTTPRoute"]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        labels[APP_LABEL] = app
        labels[TRACK_LABEL] = CANARY_TRACK
        if obj["kind"] == "InferenceService":
            served = obj["spec"]["predictor"]["model"]
            served["args"] = [*served.get("args", ()), f"--model_name={app}"]
    return objects
