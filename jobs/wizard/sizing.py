"""Compute step sizing from Check model's answer (pure): a tile per GPU kind of the profile's
catalog with its memory and what the model needs on it, and whether a chosen layout holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jobs import manifest as mf
from jobs.machine_catalog import cpu_machines, gpu_kinds
from jobs.wizard.fields import CPU_KIND
from models_catalog.check_types import CheckResult
from models_catalog.sizing import (
    Suggestion,
    human_bytes,
    machine_memory,
    parse_bytes,
)


@dataclass(frozen=True)
class Tile:
    """One choice of where a replica runs: the CPU, or a GPU kind of the catalog."""

    kind: str  # a catalog name, or "cpu"
    memory: str  # "22.5 GiB per GPU, 8 per node"
    fits: bool  # False: greyed out, `reason` says why
    reason: str = ""
    needed: str = ""  # what the model needs on it, "19.8 GiB per GPU on 1 GPU"
    gpus: int = 0  # the smallest layout that holds it (GPUs per node, nodes)
    nodes: int = 1
    suggested: bool = False  # Check model's choice
    chosen: bool = False
    memory_needed: str = ""  # the CPU's: the replica memory that holds the model


def _sized(check: CheckResult | None) -> bool:
    """Check model sized the model for GPUs (vLLM or parakeet, not a predictive format)."""
    return check is not None and check.task != "predict" and bool(check.options or check.unfit)


def _kind_memory(kind: Mapping) -> str:
    try:
        memory = human_bytes(parse_bytes(kind.get("gpuMemory", 0)))
    except (TypeError, ValueError):
        memory = "unknown memory"
    per_node = kind.get("gpusPerNode")
    return f"{memory} per GPU" + (f", {per_node} per node" if per_node else "")


def _needed(option: Suggestion) -> str:
    spread = f"{option.gpus_per_replica} GPU{'s' if option.gpus_per_replica > 1 else ''}"
    if option.nodes_per_replica > 1:
        spread += f" on each of {option.nodes_per_replica} nodes"
    return f"needs {human_bytes(option.needed_per_gpu_bytes)} per GPU on {spread}"


def _cpu_tile(check: CheckResult | None, catalog: Sequence[Mapping], chosen: str | None) -> Tile:
    """The CPU: this machine's cores and memory when the catalog has a machine without GPUs,
    greyed when none of them holds the model."""
    suggested = check.suggestion if check else None
    on_cpu = cpu_memory(check)
    machines = cpu_machines(catalog)
    memory = "no GPU: the replica's CPU and memory"
    if machines:
        shape = machines[0]
        have = machine_memory(shape)
        memory = f"no GPU: {shape.get('nodeCpu', '?')} cores, " + (
            f"{human_bytes(have)} of memory" if have is not None else "memory not given"
        )
    unfit = dict(check.unfit) if check and _sized(check) else {}
    reasons = [unfit[m["name"]] for m in machines if m["name"] in unfit]
    if machines and len(reasons) == len(machines):
        return Tile(
            kind=CPU_KIND,
            memory=memory,
            fits=False,
            reason=f"Too small: {reasons[0]}",
            chosen=chosen == CPU_KIND,
        )
    return Tile(
        kind=CPU_KIND,
        memory=memory,
        fits=True,
        needed=(f"needs about {on_cpu} of memory; " if on_cpu else "")
        + "for small or predictive models, large language models run slowly",
        suggested=bool(suggested and suggested.accelerator == "cpu"),
        chosen=chosen == CPU_KIND,
        memory_needed=on_cpu or "",
    )


def tiles(check: CheckResult | None, catalog: Sequence[Mapping], chosen: str | None) -> list[Tile]:
    """The CPU first, then every GPU kind of the catalog: too small ones greyed with why."""
    sized = _sized(check)
    options = {o.gpu_kind: o for o in (check.options if check else [])}
    unfit = dict(check.unfit) if check else {}
    suggested = check.suggestion if check else None
    suggested_kind = suggested.gpu_kind if suggested and suggested.accelerator == "gpu" else None
    out = [_cpu_tile(check, catalog, chosen)]
    for kind in gpu_kinds(catalog):
        name = kind["name"]
        option = options.get(name)
        if sized and option is None:
            reason = unfit.get(name, "Check model found no layout of it that holds the model")
            reason = ("Too small: " if reason.startswith("needs") else "Cannot run it: ") + reason
            out.append(
                Tile(name, _kind_memory(kind), fits=False, reason=reason, chosen=name == chosen)
            )
            continue
        out.append(
            Tile(
                kind=name,
                memory=_kind_memory(kind),
                fits=True,
                needed=_needed(option) if option else "Check model could not size it here",
                gpus=option.gpus_per_replica if option else 1,
                nodes=option.nodes_per_replica if option else 1,
                suggested=name == suggested_kind,
                chosen=name == chosen,
            )
        )
    return out


def chosen_size(check: CheckResult | None) -> tuple[str | None, int, int]:
    """The size ServeDeck chooses: Check model's suggestion, else the CPU (kind None)."""
    suggestion = check.suggestion if check and check.can_serve else None
    if suggestion is None or suggestion.accelerator != "gpu" or not suggestion.gpu_kind:
        return None, 0, 1
    return suggestion.gpu_kind, suggestion.gpus_per_replica, suggestion.nodes_per_replica


def cpu_memory(check: CheckResult | None) -> str | None:
    """The memory the manifest fills for a generative model on CPU (mf.cpu_memory: its weights
    and the runtime in three quarters of it), as text; None when the built-in default holds it."""
    if check is None or check.task == "predict":
        return None
    memory = mf.cpu_memory(check.weights_on_cpu)
    return mf.format_bytes(memory) if memory is not None else None
