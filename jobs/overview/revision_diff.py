"""The difference between two revisions of an application: their manifests as YAML (every
default filled in, as they were saved), compared line by line as a unified diff. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

CONTEXT_LINES = 3
MAX_DIFF_LINES = 2000


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "added", "removed", "hunk", "header" or "same"
    text: str


def manifest_yaml(manifest: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(manifest), sort_keys=False, allow_unicode=True)


def unified(old: Mapping[str, Any], new: Mapping[str, Any], old_name: str, new_name: str):
    """The unified diff from `old` to `new` as classified lines ([] when they are the same),
    at most MAX_DIFF_LINES of them."""
    lines = difflib.unified_diff(
        manifest_yaml(old).splitlines(),
        manifest_yaml(new).splitlines(),
        fromfile=old_name,
        tofile=new_name,
        n=CONTEXT_LINES,
        lineterm="",
    )
    out = []
    for line in lines:
        if len(out) >= MAX_DIFF_LINES:
            out.append(DiffLine("hunk", f"… cut at {MAX_DIFF_LINES} lines"))
            break
        out.append(DiffLine(_kind(line), line))
    return out


def _kind(line: str) -> str:
    if line.startswith(("--- ", "+++ ")):
        return "header"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "added"
    if line.startswith("-"):
        return "removed"
    return "same"
