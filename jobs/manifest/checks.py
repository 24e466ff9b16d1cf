"""Value checkers for single fields: each returns the typed value or raises Reject with the
reason and, when a generic one would mislead, the fix. Also the copy of free-form data.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .problems import Problem, child_path, given, kind_of, show
from .quantity import parse_bytes, parse_cpu
from .uri import UriError, parse_uri

INT32_MAX = 2**31 - 1

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DOMAIN = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
)
_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
DNS_LABEL_ACCEPTS = (
    "a DNS-1123 label: 1 to 63 lowercase letters, digits or '-', starting and ending with a "
    "letter or digit"
)


class Bad(NamedTuple):
    """A value that failed its check (already reported); rules that need it are skipped."""

    raw: Any


class Qty(NamedTuple):
    """A quantity as written (kept for the filled manifest) and its exact amount."""

    raw: Any
    amount: Any  # Fraction for CPU, int for bytes


class Reject(Exception):  # noqa: N818 - it is a verdict, not an error of ours
    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


# --- checkers: each returns the typed value or raises Reject -------------------------------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Reject(f"{given(value)}, not text")
    return value


def enum(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        if not isinstance(value, str):
            raise Reject(f"{given(value)}, not one of the accepted names")
        for choice in choices:
            if choice.lower() == value.strip().lower():
                raise Reject(f"{show(value)} is not spelled as accepted", f"Write it as {choice}.")
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
        fix = f"Did you mean {close[0]}?" if close else None
        raise Reject(f"{show(value)} is not an accepted value", fix)

    return check


def dns_label(value: Any) -> str:
    text = _text(value)
    if len(text) > 63:
        raise Reject(f"{show(text)} is {len(text)} characters long, more than 63")
    if not _DNS_LABEL.fullmatch(text):
        fix = None
        lowered = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
        if lowered and _DNS_LABEL.fullmatch(lowered[:63]):
            fix = f"For example {lowered[:63]}."
        raise Reject(f"{show(text)} is not a DNS-1123 label", fix)
    return text


def nonempty_text(value: Any) -> str:
    text = _text(value)
    if not text.strip():
        raise Reject("empty text is not a name")
    return text


def domain_name(value: Any) -> str:
    text = _text(value)
    if "://" in text or "/" in text:
        raise Reject(f"{show(text)} is a URL, not a domain name", "Give the domain only.")
    if not _DOMAIN.fullmatch(text):
        raise Reject(f"{show(text)} is not a lowercase domain name")
    return text


def identifier(value: Any) -> str:
    text = _text(value)
    if not _IDENT.fullmatch(text):
        raise Reject(f"{show(text)} is not a name of letters, digits, '_', '.' or '-'")
    return text


def whole(low: int, high: int = INT32_MAX, zero: str | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        number = _whole(value)
        if number == 0 and zero and low > 0:
            raise Reject(zero)
        if number < low:
            raise Reject(f"{show(number)} is below {low}")
        if number > high:
            raise Reject(f"{show(number)} is above {high}")
        return number

    return check


def _whole(value: Any) -> int:
    if isinstance(value, bool):
        raise Reject(f"{show(value)} is true/false, not a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)  # JSON clients may send 2.0 for 2
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        raise Reject(f"{show(value)} is text, not a whole number", "Write it without quotes.")
    raise Reject(f"{given(value)}, not a whole number")


# scaling.scaleToZeroAfter: "90s", "15m", "2h", "1h30m"; at least 1s, at most 30 days.
DEFAULT_SCALE_TO_ZERO_AFTER = "15m"
DURATION_MIN_SECONDS = 1
DURATION_MAX_SECONDS = 30 * 86400
_DURATION = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
DURATION_ACCEPTS = (
    "a duration of hours, minutes and seconds such as 90s, 15m, 2h or 1h30m, from 1s to 720h"
)


# Longer text is no duration of 1s to 720h (and its digits could exceed int()'s own limit).
DURATION_MAX_LENGTH = 32


def duration_seconds(text: str) -> int | None:
    """The seconds a duration like "1h30m" says; None when it is not one."""
    if not isinstance(text, str) or len(text) > DURATION_MAX_LENGTH:
        return None
    found = _DURATION.fullmatch(text.strip())
    if found is None or not any(found.groups()):
        return None
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def duration(value: Any) -> str:
    text = _text(value)
    if len(text) > DURATION_MAX_LENGTH:
        raise Reject(
            f"is {len(text)} characters long, not a duration", "Write it like 90s, 15m or 2h."
        )
    seconds = duration_seconds(text)
    if seconds is None:
        raise Reject(f"{show(text)} is not a duration", "Write it like 90s, 15m or 2h.")
    if not DURATION_MIN_SECONDS <= seconds <= DURATION_MAX_SECONDS:
        raise Reject(f"{show(text)} is outside 1s to 720h")
    return text.strip()


def number(low: float, high: float, *, low_open: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and re.fullmatch(r"\s*[0-9.]+\s*", value):
                raise Reject(f"{show(value)} is text, not a number", "Write it without quotes.")
            raise Reject(f"{given(value)}, not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise Reject(f"{show(value)} is not a finite number")
        if (value <= low) if low_open else (value < low):
            raise Reject(f"{show(value)} is {'not above' if low_open else 'below'} {low:g}")
        if value > high:
            raise Reject(f"{show(value)} is above {high:g}")
        return value

    return check


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        raise Reject(
            f"{show(value)} is text, not true/false", "Write true or false without quotes."
        )
    raise Reject(f"{given(value)}, not true or false")


def strings(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise Reject(f"{given(value)}, not a list of text")
    if len(value) > 256:
        raise Reject(f"{len(value)} items is more than 256")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise Reject(
                f"item {index} is {show(item)}, {kind_of(item)}",
                'Quote every argument, for example "--max-num-batched-tokens=8192".',
            )
    return list(value)


# rollout.steps: percents of traffic the new revision takes, rising, before it takes all.
MAX_ROLLOUT_STEPS = 10
STEPS_ACCEPTS = (
    f"a list of 1 to {MAX_ROLLOUT_STEPS} rising whole percents from 1 to 99, such as [10, 50] "
    "(100 follows the last)"
)


def percent_steps(value: Any) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise Reject(f"{given(value)}, not a list of percents", "Write it like [10, 50].")
    if not 1 <= len(value) <= MAX_ROLLOUT_STEPS:
        raise Reject(f"{len(value)} steps is not 1 to {MAX_ROLLOUT_STEPS}")
    out: list[int] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            raise Reject(
                f"step {index} is {show(item)}, {kind_of(item)}",
                "Write each step as a whole percent without quotes, like [10, 50].",
            )
        if not 1 <= item <= 99:
            raise Reject(
                f"step {index} is {item}, outside 1 to 99",
                "Leave 100 out: the last step is followed by all of the traffic.",
            )
        if out and item <= out[-1]:
            raise Reject(
                f"step {index} ({item}) is not above the step before it ({out[-1]})",
                "Write the steps rising, like [10, 50].",
            )
        out.append(item)
    return out


def _positive_quantity(value: Any, parse) -> Qty:
    try:
        amount = parse(value)
    except ValueError as exc:
        raise Reject(str(exc).split("; accepts")[0]) from None
    if amount <= 0:
        raise Reject(f"{show(value)} is not above zero")
    return Qty(value, amount)


def cpu_quantity(value: Any) -> Qty:
    return _positive_quantity(value, parse_cpu)


def byte_quantity(value: Any) -> Qty:
    return _positive_quantity(value, parse_bytes)


def uri(value: Any) -> Any:
    text = _text(value)
    try:
        return parse_uri(text)
    except UriError as exc:
        raise Reject(exc.reason, exc.fix) from None


def exact(expected: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value != expected:
            raise Reject(f"{show(value)} is not {expected}")
        return value

    return check


_MAX_NODES = 20_000
_MAX_DEPTH = 64


class _TooBig(Exception):
    pass


def plain_copy(value: Any, path: str, problems: list[Problem]) -> Any:
    """A JSON-safe deep copy of free-form data (text keys; text, numbers, true/false, null,
    lists, mappings), so what is stored is exactly what was checked. YAML aliases can make a
    small text expand to a huge or cyclic structure: the copy stops at a node budget."""
    budget = [_MAX_NODES]
    bad: list[Problem] = []
    try:
        copied = _copy(value, path, 0, budget, bad)
    except (_TooBig, RecursionError):
        problems.append(
            Problem(
                path,
                f"is larger than {_MAX_NODES} values or nested deeper than {_MAX_DEPTH} "
                "levels (YAML aliases expand); accepts a plain InferenceService. Write it "
                "out without anchors and aliases.",
            )
        )
        return Bad(value)
    if bad:
        problems.extend(bad[:10])
        return Bad(value)
    return copied


def _copy(value: Any, path: str, depth: int, budget: list[int], bad: list[Problem]) -> Any:
    budget[0] -= 1
    if budget[0] < 0 or depth > _MAX_DEPTH:
        raise _TooBig
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:  # Kubernetes and JSON stores hold 64-bit integers
            return value
    elif isinstance(value, float):
        if math.isfinite(value):
            return value
    elif isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                bad.append(
                    Problem(
                        child_path(path, key),
                        f"the key {show(key)} is {kind_of(key)}; accepts text keys only. Quote it.",
                    )
                )
                continue
            out[key] = _copy(item, child_path(path, key), depth + 1, budget, bad)
        return out
    elif isinstance(value, (list, tuple)):
        return [_copy(item, f"{path}[{i}]", depth + 1, budget, bad) for i, item in enumerate(value)]
    bad.append(
        Problem(
            path,
            f"{show(value)} is not plain data (YAML reads unquoted dates and !!tags as other "
            "types); accepts text, 64-bit numbers, true/false, null, lists and mappings. "
            "Quote it.",
        )
    )
    return None
