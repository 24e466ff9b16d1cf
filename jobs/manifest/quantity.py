"""Kubernetes quantities ("500m", "2", "8Gi", "1e3"), parsed exactly as Fractions.

Bytes never pass through a float: a rounding error there would change what the scheduler
is asked for.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_BINARY = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_BINARY_DESC = sorted(_BINARY.items(), key=lambda item: -item[1])

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
# Kubernetes itself caps quantities far below this; the cap keeps "1e999999999" from
# turning into a number with a billion digits.
_MAX_EXPONENT = 30
_MAX_DIGITS = 40

ACCEPTS = "a Kubernetes quantity such as 500m, 2, 1.5, 8Gi or 1e3"


def parse_quantity(value: Any) -> Fraction:
    """Parse a quantity (text, or a whole/decimal number from YAML) exactly.

    Raises ValueError with a message that says what is accepted.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{_describe(value)} is not a quantity; accepts {ACCEPTS}")
    if isinstance(value, int):
        if abs(value) >= 10**_MAX_DIGITS:
            raise ValueError(f"{_describe(value)} is out of range for a quantity")
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a quantity; accepts {ACCEPTS}")
        # repr gives the shortest decimal that reads back as this float, which is what
        # the user typed in YAML ("0.5"), so no binary fraction leaks in.
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(f"{_describe(value)} is not a quantity; accepts {ACCEPTS}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        shown = repr(text if len(text) <= 40 else text[:40] + "…")
        hint = ""
        if text != text.strip():
            hint = " (remove the spaces)"
        elif re.fullmatch(r"[0-9.]+\s*[a-zA-Z]+", text):
            hint = " (suffixes are case-sensitive: n u m k M G T P E, Ki Mi Gi Ti Pi Ei)"
        raise ValueError(f"{shown} is not a quantity{hint}; accepts {ACCEPTS}")
    number = match["number"]
    if len(number) > _MAX_DIGITS:
        raise ValueError(f"{text[:20]!r}… has too many digits to be a quantity")
    amount = Fraction(number)
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(
                f"{text!r} is out of range; accepts exponents from -{_MAX_EXPONENT} "
                f"to {_MAX_EXPONENT}"
            )
        amount *= Fraction(10) ** exponent
    elif match["suffix"]:
        suffix = match["suffix"]
        amount *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -amount if match["sign"] == "-" else amount


def parse_bytes(value: Any) -> int:
    """A quantity of bytes: must come out a whole, non-negative number."""
    amount = parse_quantity(value)
    if amount.denominator != 1:
        raise ValueError(
            f"{_describe(value)} is {_fraction_text(amount)} bytes, not a whole number of "
            "bytes; accepts a quantity such as 512Mi, 8Gi or 30G"
        )
    if amount < 0:
        raise ValueError(f"{_describe(value)} is negative; accepts a quantity such as 8Gi")
    return int(amount)


def parse_cpu(value: Any) -> Fraction:
    """CPU cores as an exact Fraction; Kubernetes counts CPU in thousandths (1m)."""
    cores = parse_quantity(value)
    if cores < 0:
        raise ValueError(f"{_describe(value)} is negative; accepts CPU cores such as 500m or 2")
    if (cores * 1000).denominator != 1:
        raise ValueError(
            f"{_describe(value)} is finer than a thousandth of a core; Kubernetes counts CPU "
            "in millicores, such as 500m or 1.5"
        )
    return cores


def format_bytes(n: int) -> str:
    """The shortest exact text for n bytes: "2Gi", "1536Mi", else the plain integer."""
    if n:
        for suffix, base in _BINARY_DESC:
            if n % base == 0:
                return f"{n // base}{suffix}"
    return str(n)


def format_cpu(cores: Fraction) -> str:
    """CPU cores as Kubernetes writes them: whole cores "3", else millicores "1500m"."""
    if cores.denominator == 1:
        return str(cores.numerator)
    milli = cores * 1000
    if milli.denominator != 1:
        raise ValueError(f"{cores} cores is finer than a millicore")
    return f"{milli.numerator}m"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    if isinstance(value, (int, float)):
        return repr(value) if abs(value) < 10**30 else "a very large number"
    return f"a {type(value).__name__}"


def _fraction_text(amount: Fraction) -> str:
    if (amount * 1000).denominator == 1:
        return str(float(amount))
    return f"{amount.numerator}/{amount.denominator}"
