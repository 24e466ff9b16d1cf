"""A name for a new model, suggested from its repository: a DNS-1123 label no application or
draft of the organisation uses yet (pure)."""

from __future__ import annotations

import re
from collections.abc import Container

MAX_LENGTH = 63
_NOT_LABEL = re.compile(r"[^a-z0-9]+")


def base_name(repo: str) -> str:
    """The label a repository's own name gives: "BAAI/bge-m3" -> "bge-m3",
    "Qwen/Qwen2.5-0.5B-Instruct" -> "qwen2-5-0-5b-instruct"; "" when nothing is left."""
    repo = (repo or "").strip().strip("/")
    repo = repo.removeprefix("hf://").split(":", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    return _NOT_LABEL.sub("-", last.lower()).strip("-")[:MAX_LENGTH].strip("-")


def suggest_name(repo: str, taken: Container[str]) -> str:
    """The repository's label if free, else the first free one of label-2, label-3, ...
    (shortened to stay within 63 characters); "" when the repository gives no label."""
    base = base_name(repo)
    if not base:
        return ""
    if base not in taken:
        return base
    number = 2
    while True:
        suffix = f"-{number}"
        candidate = base[: MAX_LENGTH - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
        number += 1
