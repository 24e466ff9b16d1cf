"""Kubernetes quantities: exact parsing (never a float for bytes) and formatting."""

from __future__ import annotations

from fractions import Fraction

import pytest

from jobs.manifest import format_bytes, format_cpu, parse_bytes, parse_cpu, parse_quantity

GI = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("2", Fraction(2)),
        (2, Fraction(2)),
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("500m", Fraction(1, 2)),
        ("1m", Fraction(1, 1000)),
        ("250u", Fraction(1, 4000)),
        ("7n", Fraction(7, 10**9)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("30G", Fraction(30 * 10**9)),
        ("2T", Fraction(2 * 10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1536Mi", Fraction(1536 * 2**20)),
        ("8Gi", Fraction(8 * GI)),
        ("0.5Gi", Fraction(GI // 2)),
        ("1.5Gi", Fraction(3 * GI // 2)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1.5e3", Fraction(1500)),
        ("5e-1", Fraction(1, 2)),
        ("1e+2", Fraction(100)),
        ("+3", Fraction(3)),
        ("-1", Fraction(-1)),
        ("0.1Gi", Fraction(GI, 10)),
    ],
    ids=lambda v: repr(v) if not isinstance(v, Fraction) else None,
)
def test_parse_quantity_is_exact(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 2",
        "2 ",
        "2 Gi",
        "8gi",
        "8GB",
        "8G i",
        "1e",
        "e3",
        "Gi",
        "1.2.3",
        "0x10",
        "1_000",
        "--1",
        "1Ki2",
        "1e999999999",
        "1" * 41,
        "nan",
        "inf",
        "½",
        True,
        False,
        None,
        [1],
        {},
        float("nan"),
        float("inf"),
        10**50,
    ],
    ids=repr,
)
def test_parse_quantity_refuses(text):
    with pytest.raises(ValueError, match="quantit|digits|range"):
        parse_quantity(text)


def test_refusal_says_what_is_accepted():
    with pytest.raises(ValueError) as info:
        parse_quantity("8gi")
    assert "case-sensitive" in str(info.value) and "8Gi" in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8Gi", 8 * GI), ("0.5Gi", GI // 2), ("1e3", 1000), (1024, 1024), ("1k", 1000), ("0", 0)],
)
def test_parse_bytes(text, expected):
    value = parse_bytes(text)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize("text", ["1.5", "100m", "0.1Ki", "-1Gi"])
def test_parse_bytes_refuses_fractions_and_negatives(text):
    with pytest.raises(ValueError, match="whole number of bytes|negative"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (2, Fraction(2)),
        ("0.001", Fraction(1, 1000)),
    ],
)
def test_parse_cpu(text, expected):
    assert parse_cpu(text) == expected


@pytest.mark.parametrize("text", ["0.0005", "1u", "-1"])
def test_parse_cpu_refuses(text):
    with pytest.raises(ValueError):
        parse_cpu(text)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0"),
        (1, "1"),
        (1000, "1000"),
        (1024, "1Ki"),
        (1536 * 2**20, "1536Mi"),
        (2 * GI, "2Gi"),
        (GI + 1, str(GI + 1)),
        (3 * 2**40, "3Ti"),
        (2**50, "1Pi"),
        (5 * 2**60, "5Ei"),
        (10**9, "1000000000"),
    ],
)
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected
    assert parse_bytes(expected) == n


@pytest.mark.parametrize(
    ("cores", "expected"), [(Fraction(3), "3"), (Fraction(3, 2), "1500m"), (Fraction(1, 4), "250m")]
)
def test_format_cpu(cores, expected):
    assert format_cpu(cores) == expected
    assert parse_cpu(expected) == cores
