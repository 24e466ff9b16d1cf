"""Which GPUs an organisation's replicas get on this machine: the ledger locked only when GPUs
are involved, free GPUs picked for the replicas to start, their holdings recorded after."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from .command import gpus_per_replica, on_gpu, replica_count
from .errors import LocalRefused
from .gpu_ledger import GpuBook, GpuLedger, Holding, parse_gpus
from .machine_check import list_gpus
from .state import AppState, Replica


class GpuPlanner:
    """One organisation's runner's use of the machine's GPU ledger (`organisation`: the name
    of its state folder, which the ledger's owners start with)."""

    def __init__(self, ledger: GpuLedger, organisation: str) -> None:
        self.ledger = ledger
        self.organisation = organisation

    def owner(self, name: str) -> str:
        """The application's name in the machine's GPU ledger: organisation folder and name."""
        return f"{self.organisation}/{name}"

    def book(
        self, manifest: Mapping[str, Any] | None, state: AppState | None
    ) -> contextlib.AbstractContextManager[GpuBook | None]:
        """The machine's GPU ledger, locked, when the manifest wants GPUs or the state's
        replicas hold some; else nothing (CPU applications never wait for the ledger)."""
        holding = state is not None and any(r.gpus for r in state.replicas)
        if holding or (manifest is not None and on_gpu(manifest)):
            return self.ledger.held()
        return contextlib.nullcontext(None)

    def record(self, book: GpuBook | None, state: AppState | None, name: str = "") -> None:
        """The ledger now holds, for this application, exactly its live replicas' GPUs
        (nothing when `state` is None)."""
        if book is None:
            return
        owner = self.owner(state.name if state is not None else name)
        book.release(owner)
        for replica in state.replicas if state is not None else []:
            gpus = parse_gpus(replica.gpus)
            if gpus and replica.pid is not None and replica.exited_at is None:
                book.record(
                    Holding(
                        owner, replica.index, gpus, replica.pid, replica.start_ticks,
                        replica.boot_id,
                    )
                )  # fmt: skip

    def plan(
        self,
        name: str,
        manifest: Mapping[str, Any],
        book: GpuBook | None,
        keep: list[Replica] | None = None,
    ) -> dict[int, str | None]:
        """CUDA_VISIBLE_DEVICES for each replica to start: GPUs no other replica on this
        machine holds, whatever its organisation (the ledger, locked by the caller until the
        servers are started and recorded). Raises LocalRefused when too few are free."""
        if not on_gpu(manifest) or book is None:
            return {}
        per_replica = gpus_per_replica(manifest)
        keep = keep or []
        kept = {r.index for r in keep}
        wanted = [i for i in range(replica_count(manifest)) if i not in kept]
        gpus, problem = list_gpus()
        if problem is not None:
            raise LocalRefused([f"No NVIDIA GPU can be used on this machine: {problem}."])
        used = book.in_use(exclude_owner=self.owner(name)) | {
            g for r in keep for g in parse_gpus(r.gpus)
        }
        free = [g for g in gpus if g not in used]
        if len(free) < per_replica * len(wanted):
            raise LocalRefused(
                [
                    f"{name} needs {per_replica * len(wanted)} GPU(s) and {len(free)} of this "
                    f"machine's {len(gpus)} are free (other local applications, of any "
                    "organisation, hold the rest); "
                    "stop one of them, or lower countPerReplica or minReplicas."
                ]
            )
        plan = {}
        for position, index in enumerate(wanted):
            chosen = free[position * per_replica : (position + 1) * per_replica]
            plan[index] = ",".join(str(g) for g in chosen)
        return plan
