"""The downloads folder's room and its snapshots' lifetime, for every organisation at once.

The folder is one for the console (SERVEDECK_DOWNLOADS_DIR). Replicas that start together
each check free disk before downloading; were each to compare only its own need with what is
free, all would pass and together fill the disk. So a download reserves its bytes in
`.servedeck/reservations.json` under one lock, checked against the free disk less the
reserve and less what live downloads of other snapshots reserved; its reservation goes when
it ends (or its process does).

Which application uses which snapshot is recorded in `.servedeck/references.json` (under the
same lock, before its replicas start); a snapshot that no application of this console uses
any more (none references it, no state names it, no download of it is under way) is deleted
when an application is deleted or moves to another one, with the blobs only it used.

Standard library only: the download launcher reserves without Django.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

try:
    from . import download_files
    from . import processes as proc
except ImportError:  # run by path, from the download launcher
    import download_files  # type: ignore[no-redef]
    import processes as proc  # type: ignore[no-redef]

SPACE_DIR = ".servedeck"
LOCK_FILE = "lock"
RESERVATIONS = "reservations.json"
REFERENCES = "references.json"
MAX_ENTRIES = 10_000  # a ledger longer than this is not ours: it is read as empty
Snapshot = tuple[str, str]  # (repo, commit)


@contextlib.contextmanager
def locked(downloads: Path) -> Iterator[Path]:
    """The downloads folder's ledgers, held against every other process of any console
    sharing it; yields the folder they are in."""
    folder = proc.private_dir(Path(downloads) / SPACE_DIR)
    with open(folder / LOCK_FILE, "a", opener=proc.private_opener) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield folder


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        return []
    return [e for e in entries if isinstance(e, dict)]


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", opener=proc.private_opener) as handle:
        handle.write(json.dumps(entries))
    os.replace(temporary, path)


# ---- reservations: downloads under way ----


def _alive(entry: dict[str, Any]) -> bool:
    """The reservation's process still runs (the same process: pid, start time and boot)."""
    pid, ticks = entry.get("pid"), entry.get("start_ticks")
    if not isinstance(pid, int) or entry.get("boot_id") != proc.boot_id():
        return False
    stat = proc.proc_stat(pid)
    return stat is not None and stat.start_ticks == ticks


def live_reservations(downloads: Path) -> list[dict[str, Any]]:
    """The reservations of downloads still under way (read without the lock: an estimate for
    the dry run; reserve() decides under it)."""
    return [e for e in _read(Path(downloads) / SPACE_DIR / RESERVATIONS) if _alive(e)]


def held_by_others(reservations: list[dict[str, Any]], snapshot: Snapshot | None) -> int:
    """Bytes reserved by downloads of snapshots other than `snapshot`: two replicas fetching
    the same snapshot share its files, so each snapshot counts once (its largest)."""
    largest: dict[Snapshot, int] = {}
    for entry in reservations:
        key = (str(entry.get("repo")), str(entry.get("commit")))
        size = entry.get("bytes")
        if key != snapshot and isinstance(size, int) and size > 0:
            largest[key] = max(largest.get(key, 0), size)
    return sum(largest.values())


def reserve(
    downloads: Path, snapshot: Snapshot, needed: int, reserve_bytes: int, what: str
) -> str | None:
    """Reserves `needed` bytes for this process's download of `snapshot` when they fit the
    free disk (read under the lock) less `reserve_bytes` and the live reservations of other
    snapshots; else returns why not (download_files.disk_refusal). A download under way has written
    part of what it reserved: counting all of it again errs on the side of the disk."""
    with locked(downloads) as folder:
        live = [e for e in _read(folder / RESERVATIONS) if _alive(e)]
        held = held_by_others(live, snapshot)
        free = shutil.disk_usage(folder).free
        refusal = download_files.disk_refusal(needed, free, downloads, what, reserve_bytes, held)
        if refusal is None:
            stat = proc.proc_stat(os.getpid())
            live.append(
                {
                    "pid": os.getpid(),
                    "start_ticks": stat.start_ticks if stat else None,
                    "boot_id": proc.boot_id(),
                    "repo": snapshot[0],
                    "commit": snapshot[1],
                    "bytes": needed,
                }
            )
        _write(folder / RESERVATIONS, live)
    return refusal


def release(downloads: Path) -> None:
    """This process's reservations end (its download is over, whichever way)."""
    with locked(downloads) as folder:
        kept = [e for e in _read(folder / RESERVATIONS) if _alive(e) and e["pid"] != os.getpid()]
        _write(folder / RESERVATIONS, kept)


# ---- references: which application uses which snapshot ----


def refer(
    downloads: Path,
    owner: str,
    snapshot: Snapshot | None,
    old: Snapshot | None,
    in_states: Collection[Snapshot] = (),
) -> list[str]:
    """Records that `owner` (an application's state folder) now uses `snapshot` (None: no
    snapshot), and deletes `old`, the one it used before, when nothing uses it any more: no
    other reference, no application's state (`in_states`, read by the caller from the other
    state files) and no download under way. Returns the folders deleted."""
    downloads = Path(downloads)
    if snapshot is None and old is None and not (downloads / SPACE_DIR).exists():
        return []  # an application that never downloaded: nothing to record
    with locked(downloads) as folder:
        kept = [e for e in _read(folder / REFERENCES) if e.get("owner") != owner]
        if snapshot is not None:
            kept.append({"owner": owner, "repo": snapshot[0], "commit": snapshot[1]})
        _write(folder / REFERENCES, kept)
        if old is None or old == snapshot:
            return []
        used = {(str(e.get("repo")), str(e.get("commit"))) for e in kept}
        used |= set(in_states)
        # A download of the repo under way (any commit) may be about to link a blob the old
        # snapshot holds too: its blobs are left until a later deletion.
        fetching = {str(e.get("repo")) for e in _read(folder / RESERVATIONS) if _alive(e)}
        if old in used or old[0] in fetching:
            return []
        return prune(downloads, *old)


def prune(downloads: Path, repo: str, commit: str) -> list[str]:
    """Deletes the snapshot of `repo` at `commit` and the blobs no other snapshot of the repo
    links to; the repo's folder too when no snapshot is left. Only paths inside the repo's
    folder are touched (its files are links into its blobs). Returns what was deleted."""
    try:
        snapshot = download_files.snapshot_folder(downloads, repo, commit)
    except ValueError:
        return []
    repo_dir = snapshot.parents[1]
    blobs = repo_dir / "blobs"
    if not snapshot.is_dir() or snapshot.is_symlink():
        return []
    others = [s for s in (repo_dir / "snapshots").iterdir() if s != snapshot]
    still_used = {b for other in others for b in _blobs_of(other, blobs)}
    unused = _blobs_of(snapshot, blobs) - still_used
    shutil.rmtree(snapshot)  # the links themselves: rmtree never follows them
    deleted = [str(snapshot)]
    for blob in sorted(unused):
        with contextlib.suppress(FileNotFoundError):
            blob.unlink()
            deleted.append(str(blob))
    if not any((repo_dir / "snapshots").iterdir()):
        shutil.rmtree(repo_dir, ignore_errors=True)
        deleted.append(str(repo_dir))
        lock_dir = Path(downloads) / ".locks" / repo_dir.name  # huggingface_hub's own
        shutil.rmtree(lock_dir, ignore_errors=True)
    return deleted


def _blobs_of(snapshot: Path, blobs: Path) -> set[Path]:
    """The blobs the snapshot's files link to (those inside `blobs` only)."""
    found = set()
    for path in snapshot.rglob("*"):
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if target.parent == Path(os.path.realpath(blobs)):
                found.add(target)
    return found
