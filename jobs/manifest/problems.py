"""Problems found in a manifest: a refusal stops the deploy, a warning is only shown.

Also the one place that renders user values into messages, so every message quotes
values the same short way and never blows up on odd input.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["refusal", "warning"]
# Who found the problem: the document's shape (schema), a rule across fields or the
# organisation's state (rule), Check model's answer (check-model), or the profile's target
# (target: the cluster's server-side dry run, what this machine lacks).
Origin = Literal["schema", "rule", "check-model", "target"]

_MAX_SHOWN = 60


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    level: Level = "refusal"
    origin: Origin = "rule"
    # The field a problem said at another path is about: the target answers at
    # spec.profileName, naming the field its sentence is about (empty: the path itself).
    about: str = ""

    @property
    def field(self) -> str:
        """The field that can fix it: where the wizard shows it."""
        return self.about or self.path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {
            "path": self.path,
            "message": self.message,
            "level": self.level,
            "origin": self.origin,
        }


PATH_KEY_CHARS = 60  # a user's key in a path: paths stay short whatever the keys


def child_path(path: str, key: Any) -> str:
    """The path of `key` under `path` ("spec.source"), as refusals name it: a key that is
    empty or holds a dot or a space is quoted (`labels[""]`, `labels["a.b"]`) so it neither
    disappears nor reads as two levels; a key that is not text is shown."""
    name = key if isinstance(key, str) else show(key)
    name = name[:PATH_KEY_CHARS]
    if name == "" or "." in name or "[" in name or any(c.isspace() for c in name):
        return f"{path}[{json.dumps(name)}]" if path else f"[{json.dumps(name)}]"
    return f"{path}.{name}" if path else name


def show(value: Any) -> str:
    """A short, repr-like rendering of a user value for messages."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            text = str(value)
        except ValueError:  # Python refuses to print ints of more than ~4300 digits
            return "a number too large to print"
        return text if len(text) <= 30 else text[:12] + "…(" + str(len(text)) + " digits)"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        text = value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "…"
        return repr(text)
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, (list, tuple)):
        return "a list" if value else "an empty list"
    return f"a {type(value).__name__} value"


def given(value: Any) -> str:
    """The value and what it is, for "X, not Y" messages: "'two' is text", "a list was given"."""
    if isinstance(value, (dict, list, tuple)):
        return f"{kind_of(value)} was given"
    return f"{show(value)} is {kind_of(value)}"


def kind_of(value: Any) -> str:
    """What a value is, in the words of a YAML user ("a list", "text", "a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


class Out:
    """Collects problems in the order they are found."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def refuse(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message, "refusal"))

    def warn(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message, "warning"))

    def pick(self, path: str, value: str, names: Iterable[str], what: str, none_yet: str) -> None:
        """Refuse a name that is not among names, suggesting the closest."""
        names = list(names)
        if not names:
            self.refuse(
                path,
                f"{show(value)} is not {what}, and there are none yet; accepts {what} once one "
                f"exists. {none_yet}",
            )
            return
        close = closest(value, names)
        fix = f"Did you mean {close}?" if close else "Set it to one of them."
        self.refuse(path, f"{show(value)} is not {what}; accepts {listing(names)}. {fix}")


def listing(names: Iterable[str], limit: int = 12) -> str:
    """Sorted names for a message, cut after limit."""
    names = sorted(names)
    text = ", ".join(names[:limit])
    return text + (f" and {len(names) - limit} more" if len(names) > limit else "")


def closest(value: str, names: Iterable[str]) -> str | None:
    names = list(names)
    for name in names:
        if name.lower() == value.lower():
            return name
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.5)
    return close[0] if close else None
