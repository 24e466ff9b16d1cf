"""KServe's CRD schemas, read from the reference copy (never vendored into the project) and
turned into JSON Schema validators that behave like the API server's strict field validation.

The CRD directory comes from, in order: the caller, the Django setting KSERVE_CRD_DIR, the
environment variable KSERVE_CRD_DIR, else <repo>/../shared/reference/kserve/crd.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator, FormatChecker, ValidationError, validators

CRD_DIR_SETTING = "KSERVE_CRD_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CRD_DIR = REPO_ROOT.parent / "shared" / "reference" / "kserve" / "crd"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A CRD names its group and kind in its first lines; reading only those finds the file of a
# kind without parsing every schema (the InferenceService one is 2 MB).
_HEADER_BYTES = 4096
_GROUP = re.compile(r"^\s+group:\s*(\S+)\s*$", re.M)
_KIND = re.compile(r"^\s+names:\s*\n(?:\s+\S.*\n)*?\s+kind:\s*(\S+)\s*$", re.M)
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class CrdDirError(FileNotFoundError):
    """The CRD directory is missing; the message names where it looked and the setting."""


def crd_dir(explicit: str | Path | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    configured = _django_setting() or os.environ.get(CRD_DIR_SETTING, "").strip()
    return Path(configured) if configured else DEFAULT_CRD_DIR


def _django_setting() -> str:
    try:
        from django.conf import settings
    except ImportError:  # pragma: no cover - Django is always installed with the console
        return ""
    if not settings.configured:
        return ""
    value = getattr(settings, CRD_DIR_SETTING, "")
    return str(value).strip() if value else ""


class Crd:
    """One CustomResourceDefinition: its scope and a validator per served version."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        spec = doc["spec"]
        self.group: str = spec["group"]
        self.kind: str = spec["names"]["kind"]
        self.namespaced: bool = spec.get("scope", "Namespaced") == "Namespaced"
        self._schemas = {
            v["name"]: v["schema"]["openAPIV3Schema"]
            for v in spec["versions"]
            if v.get("served", True) and "schema" in v
        }
        self._validators: dict[str, Any] = {}

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(self._schemas)

    def validator(self, version: str) -> Any | None:
        if version not in self._schemas:
            return None
        if version not in self._validators:
            schema = strict_schema(self._schemas[version])
            self._validators[version] = StrictValidator(schema, format_checker=_FORMATS)
        return self._validators[version]


@lru_cache(maxsize=8)
def crd_files(directory: Path) -> dict[tuple[str, str], Path]:
    """(group, kind) -> file, from the header of each CRD file in the directory."""
    if not directory.is_dir():
        raise CrdDirError(
            f"no CRD directory at {directory}; set {CRD_DIR_SETTING} (setting or environment "
            "variable) to the folder of KServe's CRD files (reference/kserve/crd)"
        )
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        with path.open(encoding="utf-8") as handle:
            head = handle.read(_HEADER_BYTES)
        group, kind = _GROUP.search(head), _KIND.search(head)
        if group and kind:
            found[(group.group(1), kind.group(1))] = path
    return found


@lru_cache(maxsize=32)
def load_crd(path: Path) -> Crd:
    with path.open(encoding="utf-8") as handle:
        return Crd(yaml.load(handle, Loader=_Loader))  # noqa: S506 - a safe loader


def crd_for(directory: Path, api_version: str, kind: str) -> Crd | None:
    group = api_version.rpartition("/")[0]
    path = crd_files(directory).get((group, kind))
    return load_crd(path) if path is not None else None


# --- from a CRD's structural schema to a strict JSON Schema -----------------------------------


def strict_schema(node: Any) -> Any:
    """A copy where unknown fields are errors (kubectl's default --validate=strict), and the
    x-kubernetes-* extensions the API server enforces become JSON Schema."""
    if not isinstance(node, Mapping):
        return node
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: strict_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), Mapping):
        out["items"] = strict_schema(out["items"])
    if isinstance(out.get("additionalProperties"), Mapping):
        out["additionalProperties"] = strict_schema(out["additionalProperties"])
    for key in ("anyOf", "allOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [strict_schema(s) for s in out[key]]
    preserve = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string") is True and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def _list_map_keys(validator: Any, keys: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """x-kubernetes-list-map-keys: no two items of the list may share all key values
    (after the API server's defaults, e.g. a port's protocol TCP)."""
    if schema.get("x-kubernetes-list-type") != "map" or not validator.is_type(instance, "array"):
        return
    item_props = (schema.get("items") or {}).get("properties") or {}
    defaults = {k: (item_props.get(k) or {}).get("default") for k in keys}
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        if not isinstance(item, Mapping):
            continue
        values = {k: item.get(k, defaults[k]) for k in keys}
        marker = json.dumps(values, sort_keys=True, default=str)
        if marker in seen:
            shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
            yield ValidationError(
                f"items {seen[marker]} and {index} have the same {shown}; each must be unique"
            )
        else:
            seen[marker] = index


StrictValidator = validators.extend(Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys})
_FORMATS = FormatChecker(())


def _integer_format(name: str) -> None:
    low, high = INT_RANGES[name]

    @_FORMATS.checks(name)
    def _check(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return True  # the type keyword reports a wrong type
        return low <= value <= high


for _name in INT_RANGES:
    _integer_format(_name)
