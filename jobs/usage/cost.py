"""What serving an application costs, pure: replica time split by UTC day, the unit it is
billed in (GPU-hours on a GPU kind, CPU core-hours on a machine without GPUs), the profile's
machine catalog price for that unit (`hourlyPrice`, set by admins), and the cost per 1,000
tokens and per API key from metering.

`hourlyPrice` on a catalog entry is the price of one GPU for an hour on a GPU kind, and of one
CPU core for an hour on a machine without GPUs, in the organisation's currency.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from jobs.machine_catalog import cpu_machines, gpu_kinds
from jobs.manifest.quantity import parse_cpu
from jobs.manifest.view import FilledManifest

PRICE_KEY = "hourlyPrice"
MAX_PRICE = 100_000  # per unit-hour: anything above is a typo


def price_problem(value: Any) -> str | None:
    """Why `value` cannot be an hourlyPrice; None when it can."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{str(value)[:40]!r} is not a number; write the price of one hour, such as 2.5."
    if not 0 <= value <= MAX_PRICE:
        return f"{value} is out of range; accepted 0 to {MAX_PRICE} per hour."
    return None


@dataclass(frozen=True)
class Unit:
    """What one replica-hour of an application is billed as."""

    machine: str  # the catalog entry's name ("l4", "cpu"), or "" when the catalog has none
    kind: str  # "GPU" or "CPU"
    per_replica: float  # GPUs, or CPU cores, one replica holds
    hourly_price: float | None  # of one unit; None when no admin set one

    @property
    def label(self) -> str:
        return f"{self.kind}-hours"


def unit_of(manifest: Mapping[str, Any], catalog: Iterable[Any]) -> Unit:
    """The unit one replica of the manifest is billed in, priced from the catalog."""
    filled = FilledManifest(manifest)
    catalog = list(catalog or ())
    if filled.on_gpu:
        kind = filled.gpu_kind or ""
        entry = next((e for e in gpu_kinds(catalog) if e["name"] == kind), None)
        gpus = (filled.gpu_count or 1) * (filled.nodes or 1)
        return Unit(kind, "GPU", float(gpus), _price(entry))
    try:
        cores = float(parse_cpu(filled.model_get("resources", "cpu")))
    except (ValueError, TypeError):
        cores = 1.0
    machines = cpu_machines(catalog)
    entry = machines[0] if machines else None
    return Unit(entry["name"] if entry else "", "CPU", cores, _price(entry))


def _price(entry: Mapping[str, Any] | None) -> float | None:
    value = entry.get(PRICE_KEY) if entry else None
    return float(value) if value is not None and price_problem(value) is None else None


def split_by_day(start: datetime, end: datetime) -> list[tuple[date, float]]:
    """The seconds from start to end in each UTC day they touch, in order."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    out = []
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), datetime.min.time(), UTC)
        stop = min(end, midnight)
        out.append((start.date(), (stop - start).total_seconds()))
        start = stop
    return out


@dataclass(frozen=True)
class Day:
    day: date
    replica_hours: float
    unit_hours: float
    cost: float | None


def per_day(replica_seconds: Mapping[date, float], unit: Unit) -> list[Day]:
    """Each day's replica-hours, unit-hours and cost (None without a price), newest first."""
    days = []
    for day in sorted(replica_seconds, reverse=True):
        hours = replica_seconds[day] / 3600
        units = hours * unit.per_replica
        cost = None if unit.hourly_price is None else units * unit.hourly_price
        days.append(Day(day, hours, units, cost))
    return days


def total_cost(days: Sequence[Day]) -> float | None:
    costs = [d.cost for d in days if d.cost is not None]
    return sum(costs) if costs and len(costs) == len(days) else None


def per_thousand_tokens(cost: float | None, tokens: int) -> float | None:
    """Cost per 1,000 tokens (prompt and completion); None without a cost or tokens."""
    if cost is None or tokens <= 0:
        return None
    return cost / tokens * 1000


def share_per_key(cost: float | None, keys: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """Each key's share of `cost`, in proportion to its tokens (requests when no tokens were
    counted): what the replicas cost while serving that key's traffic."""
    if cost is None:
        return [None] * len(keys)
    measure = "tokens" if any(k.get("tokens") for k in keys) else "requests"
    total = sum(k.get(measure) or 0 for k in keys)
    if not total:
        return [0.0] * len(keys)
    return [cost * (k.get(measure) or 0) / total for k in keys]


def keep_prices(old: Iterable[Any], new: list[dict]) -> list[dict]:
    """`new` (a catalog read again from the machine) with the prices `old` set on entries of
    the same name: discovering the machine again does not undo what an admin priced."""
    prices = {
        e["name"]: e[PRICE_KEY]
        for e in old or ()
        if isinstance(e, Mapping) and isinstance(e.get("name"), str) and PRICE_KEY in e
    }
    return [
        dict(e, **{PRICE_KEY: prices[e["name"]]}) if e.get("name") in prices else e for e in new
    ]
