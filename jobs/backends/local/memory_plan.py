"""Which sleeping-eligible models to put to sleep so that another can start on this machine
when memory is short: those idle longest first, never one that must stay up (minReplicas 1 or
more), and when not enough can be freed the figures said in words. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Running:
    """A model running on this machine: its memory (all replicas) and since when it is idle
    (epoch seconds); `sleeps` when it has minReplicas 0."""

    name: str
    memory: int
    idle_since: float
    sleeps: bool


@dataclass(frozen=True)
class Plan:
    to_sleep: tuple[str, ...]  # in this order
    refusal: str  # empty when it fits (after those sleep)


def plan(name: str, needs: int, free: int, running: list[Running]) -> Plan:
    """What to put to sleep so that `name`, needing `needs` bytes, fits in `free` bytes."""
    if needs <= free:
        return Plan((), "")
    chosen: list[str] = []
    freed = 0
    for other in sorted(
        (r for r in running if r.sleeps and r.name != name), key=lambda r: r.idle_since
    ):
        if free + freed >= needs:
            break
        chosen.append(other.name)
        freed += other.memory
    if free + freed >= needs:
        return Plan(tuple(chosen), "")
    staying = sum(r.memory for r in running if not r.sleeps and r.name != name)
    return Plan(
        (),
        f"{name} needs {needs / GIB:.1f} GiB of memory and this machine has "
        f"{free / GIB:.1f} GiB free; putting every idle model with minReplicas 0 to sleep "
        f"would free {freed / GIB:.1f} GiB, and the models that must stay up hold "
        f"{staying / GIB:.1f} GiB. Stop another model, or lower resources.memory.",
    )
