"""The manifest as a JSON Schema, generated from schema.py's field tree (never written twice).

The API's OpenAPI document uses it for request bodies, so a client (or a fuzzer) generated
from the document sends manifest-shaped bodies. It describes shapes and static ranges only:
cross-field rules (rules.py) and the organisation's state are for the dry run to say.
"""

from __future__ import annotations

import inspect
from typing import Any

import yaml

from . import adapters, checks
from .schema import DOCUMENT, Group, Leaf, Opaque

# Leaves whose check is a plain function: the JSON type it accepts.
_PLAIN: dict[Any, dict[str, Any]] = {
    checks.dns_label: {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
    checks.nonempty_text: {"type": "string", "minLength": 1, "pattern": r"\S"},
    checks.domain_name: {"type": "string", "format": "hostname"},
    checks.identifier: {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$"},
    checks.boolean: {"type": "boolean"},
    checks.strings: {"type": "array", "items": {"type": "string"}, "maxItems": 256},
    checks.cpu_quantity: {"type": ["string", "number"]},
    checks.byte_quantity: {"type": ["string", "integer"]},
    checks.uri: {"type": "string"},
    checks.percent_steps: {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 99},
        "minItems": 1,
        "maxItems": checks.MAX_ROLLOUT_STEPS,
    },
    checks.duration: {"type": "string", "pattern": r"^\s*([0-9]+h)?([0-9]+m)?([0-9]+s)?\s*$"},
    adapters.shape: {
        "type": "array",
        "maxItems": adapters.MAX_ADAPTERS,
        "items": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "maxLength": 63,
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                },
                "uri": {"type": "string"},
            },
            "required": ["name", "uri"],
            "additionalProperties": False,
        },
    },
}


def _closure(check) -> dict[str, Any]:
    return inspect.getclosurevars(check).nonlocals


def _made_by(check, factory) -> bool:
    return check.__qualname__.startswith(f"{factory.__name__}.<locals>.")


def _leaf(leaf: Leaf) -> dict[str, Any]:
    check = leaf.check
    if check in _PLAIN:
        schema = dict(_PLAIN[check])
    elif _made_by(check, checks.enum):
        schema = {"type": "string", "enum": list(_closure(check)["choices"])}
    elif _made_by(check, checks.exact):
        schema = {"type": "string", "const": _closure(check)["expected"]}
    elif _made_by(check, checks.whole):
        bounds = _closure(check)
        schema = {"type": "integer", "minimum": bounds["low"], "maximum": bounds["high"]}
    elif _made_by(check, checks.number):
        bounds = _closure(check)
        low = "exclusiveMinimum" if bounds["low_open"] else "minimum"
        schema = {"type": "number", low: bounds["low"], "maximum": bounds["high"]}
    else:  # a check this module does not know yet: say what it accepts, constrain nothing
        schema = {}
    schema["description"] = leaf.accepts + (f" (default: {leaf.default})" if leaf.default else "")
    example = _example(leaf.example)
    if example is not None:
        schema["examples"] = [example]
    return schema


def _example(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _node(node: Any) -> dict[str, Any]:
    if isinstance(node, Leaf):
        return _leaf(node)
    if isinstance(node, Opaque):
        return {"type": "object", "description": node.accepts}
    required = [name for name, child in node.fields.items() if getattr(child, "required", False)]
    schema: dict[str, Any] = {
        "type": "object",
        "description": node.accepts,
        "properties": {name: _node(child) for name, child in node.fields.items()},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema of an Application manifest (docs/manifest.md)."""
    assert isinstance(DOCUMENT, Group)
    schema = _node(DOCUMENT)
    schema["title"] = "Application manifest"
    return schema
