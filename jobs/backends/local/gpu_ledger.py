"""The machine-wide GPU ledger of the local backend: which GPU indexes each running replica
holds, for every organisation's runner on this machine.

Every organisation has a state folder of its own under one root (state_root/<org>/<app>);
GPUs belong to the machine, so the ledger lives in that root (gpus.json, beside the lock
gpus.lock) and one lock guards the whole decision: read what is held, pick free GPUs, start
the servers, record them. Two applies, in one process or in two, can therefore never pick the
same GPU.

A holding names its process (pid, start time, boot): a replica that crashed, or a machine
that rebooted, releases its GPUs without anyone saying so. A missing or unreadable ledger is
rebuilt from the applications' state files, which record the GPUs each replica was given.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from . import processes as proc
from .state import STATE_FILE

LEDGER_FILE = "gpus.json"
LOCK_FILE = "gpus.lock"


@dataclass(frozen=True)
class Holding:
    """The GPUs one replica of one application holds, and the process that holds them."""

    owner: str  # "<organisation folder>/<application>"
    replica: int
    gpus: tuple[int, ...]
    pid: int
    start_ticks: int | None
    boot_id: str | None


def parse_gpus(value: str | None) -> tuple[int, ...]:
    """CUDA_VISIBLE_DEVICES as recorded ("0,1"), as indexes; () for None or ""."""
    return tuple(int(g) for g in value.split(",")) if value else ()


def holds(holding: Holding) -> bool:
    """The holding's process still runs: same boot, same pid, same start time."""
    if holding.boot_id != proc.boot_id():
        return False
    stat = proc.proc_stat(holding.pid)
    if stat is None:
        return False
    return holding.start_ticks is None or stat.start_ticks == holding.start_ticks


class GpuBook:
    """The ledger's holdings while its lock is held; changes are written when the lock goes."""

    def __init__(self, holdings: Iterable[Holding]) -> None:
        # Crashed replicas and a reboot release their GPUs here.
        self.holdings = [h for h in holdings if holds(h)]

    def in_use(self, exclude_owner: str | None = None) -> set[int]:
        return {g for h in self.holdings if h.owner != exclude_owner for g in h.gpus}

    def release(self, owner: str, replicas: Iterable[int] | None = None) -> None:
        """Free what `owner` holds: every replica's GPUs, or those of `replicas` only."""
        which = None if replicas is None else set(replicas)
        self.holdings = [
            h
            for h in self.holdings
            if not (h.owner == owner and (which is None or h.replica in which))
        ]

    def record(self, holding: Holding) -> None:
        self.release(holding.owner, [holding.replica])
        if holding.gpus:
            self.holdings.append(holding)


class GpuLedger:
    """The ledger file in `root` (the folder holding every organisation's state folder)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @contextlib.contextmanager
    def held(self) -> Iterator[GpuBook]:
        """The machine-wide lock, and the holdings under it; saved when the block ends."""
        proc.private_dir(self.root)
        # Each holder opens the lock file itself: flock then orders threads as well as
        # processes (a lock belongs to an open file, not to the process).
        with open(self.root / LOCK_FILE, "a", opener=proc.private_opener) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
            book = GpuBook(self._load())
            yield book
            self._save(book)

    def _load(self) -> list[Holding]:
        try:
            data = json.loads((self.root / LEDGER_FILE).read_text())
            return [
                Holding(**{**entry, "gpus": tuple(entry["gpus"])}) for entry in data["holdings"]
            ]
        except FileNotFoundError:
            return list(self._from_state_files())
        except (ValueError, TypeError, KeyError):
            # Written only under the lock and atomically: unreadable means edited by hand.
            return list(self._from_state_files())

    def _from_state_files(self) -> Iterator[Holding]:
        """The holdings the applications' state files record (a console started on a root
        written before the ledger, or after the ledger was removed)."""
        for state_file in sorted(self.root.glob(f"*/*/{STATE_FILE}")):
            owner = f"{state_file.parent.parent.name}/{state_file.parent.name}"
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
                state = json.loads(state_file.read_text())  # written atomically
                for replica in state.get("replicas", []):
                    gpus = parse_gpus(replica.get("gpus"))
                    if gpus and replica.get("exited_at") is None and replica.get("pid"):
                        yield Holding(
                            owner,
                            int(replica["index"]),
                            gpus,
                            int(replica["pid"]),
                            replica.get("start_ticks"),
                            replica.get("boot_id"),
                        )

    def _save(self, book: GpuBook) -> None:
        temporary = self.root / f".{LEDGER_FILE}.tmp"
        data = {"holdings": [asdict(h) for h in book.holdings]}
        with open(temporary, "w", opener=proc.private_opener) as handle:
            handle.write(json.dumps(data, indent=1))
        os.replace(temporary, self.root / LEDGER_FILE)
