"""KubeVirt's OpenAPI (Swagger 2.0) definitions, read from the reference copy (never vendored
into the project), as strict JSON Schema validators: an unknown field is an error, as with
the API server's strict field validation.

The document comes from, in order: the caller, the Django setting KUBEVIRT_OPENAPI, the
environment variable KUBEVIRT_OPENAPI, else <repo>/../shared/reference/kubevirt/swagger.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator, ValidationError

from .schemas import REPO_ROOT

OPENAPI_SETTING = "KUBEVIRT_OPENAPI"
DEFAULT_OPENAPI = REPO_ROOT.parent / "shared" / "reference" / "kubevirt" / "swagger.json"
KUBEVIRT_GROUP = "kubevirt.io"
# apiVersion + kind -> the definition that describes it.
DEFINITIONS = {
    ("kubevirt.io/v1", "VirtualMachine"): "v1.VirtualMachine",
    ("kubevirt.io/v1", "VirtualMachineInstance"): "v1.VirtualMachineInstance",
    ("kubevirt.io/v1", "KubeVirt"): "v1.KubeVirt",
}


class OpenApiError(FileNotFoundError):
    """The OpenAPI document is missing; the message names where it looked and the setting."""


def openapi_path(explicit: str | Path | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    configured = ""
    try:
        from django.conf import settings

        if settings.configured:
            configured = str(getattr(settings, OPENAPI_SETTING, "") or "").strip()
    except ImportError:  # pragma: no cover - Django is always installed with the console
        pass
    configured = configured or os.environ.get(OPENAPI_SETTING, "").strip()
    return Path(configured) if configured else DEFAULT_OPENAPI


@lru_cache(maxsize=4)
def _definitions(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise OpenApiError(
            f"no KubeVirt OpenAPI document at {path}; set {OPENAPI_SETTING} (setting or "
            "environment variable) to KubeVirt's api/openapi-spec/swagger.json"
        )
    with path.open(encoding="utf-8") as handle:
        document = json.load(handle)
    return {name: _strict(schema) for name, schema in document["definitions"].items()}


def _strict(node: Any) -> Any:
    """Swagger 2 schema -> draft 4 JSON Schema: closed objects, `nullable`, int-or-string."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: _strict(v) for k, v in node.items() if k not in ("description", "default")}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if out.get("format") == "int-or-string":
        out.pop("type", None)
        out["type"] = ["integer", "string"]
    if out.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if "$ref" in out and len(out) > 1:
        # Draft 4 ignores siblings of $ref; keep the reference, which carries the schema.
        out = {"$ref": out["$ref"]}
    return out


@lru_cache(maxsize=16)
def _validator(path: Path, definition: str) -> Draft4Validator:
    definitions = _definitions(path)
    schema = {"$ref": f"#/definitions/{definition}", "definitions": definitions}
    return Draft4Validator(schema)


def kubevirt_errors(
    obj: Mapping[str, Any], path: str | Path | None = None
) -> Iterator[ValidationError] | None:
    """The schema errors of a KubeVirt object, or None when its kind has no definition here."""
    definition = DEFINITIONS.get((obj.get("apiVersion"), obj.get("kind")))
    if definition is None:
        return None
    return _validator(openapi_path(path), definition).iter_errors(obj)


def is_kubevirt(obj: Mapping[str, Any]) -> bool:
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.startswith(f"{KUBEVIRT_GROUP}/")
