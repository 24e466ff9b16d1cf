"""Reading and writing one field of a manifest document by its dotted path (pure).

The wizard's forms map inputs to paths such as `spec.source.model.resources.cpu`; an empty
input removes the field so the manifest's own default applies, and emptied groups go too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MODEL = "spec.source.model"


def split(path: str) -> list[str]:
    return path.split(".") if path else []


def get(doc: Any, path: str, default: Any = None) -> Any:
    """The value at `path`, or `default` when any part of the way is missing or not a mapping."""
    for key in split(path):
        if not isinstance(doc, Mapping) or key not in doc:
            return default
        doc = doc[key]
    return doc


def has(doc: Any, path: str) -> bool:
    marker = object()
    return get(doc, path, marker) is not marker


def put(doc: dict, path: str, value: Any) -> dict:
    """Set `path` to `value` in place (creating groups on the way); None removes it."""
    if value is None:
        return remove(doc, path)
    keys = split(path)
    node = doc
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value
    return doc


def remove(doc: dict, path: str) -> dict:
    """Remove `path` in place, and every group left empty by it."""
    keys = split(path)
    trail: list[tuple[dict, str]] = []
    node: Any = doc
    for key in keys[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return doc
        trail.append((node, key))
        node = node[key]
    if not isinstance(node, dict) or keys[-1] not in node:
        return doc  # nothing there: nothing to prune either
    del node[keys[-1]]
    for parent, key in reversed(trail):
        if parent[key]:
            break
        del parent[key]
    return doc


def copied(doc: Any) -> dict:
    """A deep copy to edit, or a fresh empty document when `doc` is not a mapping."""
    return copy.deepcopy(doc) if isinstance(doc, dict) else {}


def under(path: str, prefix: str) -> bool:
    """`path` is `prefix` itself or inside it ("a.b[0]" is inside "a.b")."""
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")
