"""An hf:// (or bucket folder's) application's download as the runner handles it: the
launcher a replica starts through and the plan it is given, the snapshot folder the replica
then serves, and the references that keep a snapshot in the downloads folder every
organisation shares."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import download_files, download_launcher
from . import download_space as space
from . import processes as proc
from . import runtimes as rt
from .machine_check import downloads_reserve, machine
from .state import STATE_FILE, AppState

LAUNCHER = str(Path(download_launcher.__file__).resolve())
DOWNLOAD_PLAN = "download.json"


def _planned_download(path: Path) -> dict[str, Any] | None:
    """The download an application's state file names (None: none, or unreadable)."""
    try:
        planned = json.loads(path.read_text()).get("download")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(planned, dict) and {"repo", "commit"} <= planned.keys():
        return planned
    return None


def snapshot_folder(state: AppState, source: tuple[str, str, str | None]) -> Path:
    """The snapshot folder an hf:// replica is served from, built again from the manifest
    as it is now and the commit resolved at apply (checked: a repo id and a commit, inside
    the downloads folder); raises ValueError with why."""
    scheme, repo, revision = source
    planned = state.download or {}
    commit = str(planned.get("commit", ""))
    if scheme not in ("hf", "s3", "gs", "https") or repo != planned.get("repo"):
        raise ValueError("spec.source.model.uri is not the repository the plan downloads")
    pinned = scheme == "hf" and revision is not None and download_files.COMMIT.fullmatch(revision)
    if pinned and revision != commit:
        raise ValueError("spec.source.model.uri is pinned to another commit; deploy again")
    return download_files.snapshot_folder(rt.configured_downloads_dir(), repo, commit)


def refer(
    states_root: Path,
    folder: Path,
    download: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
) -> None:
    """Records in the downloads folder the snapshot the application whose state folder is
    `folder` now uses (None: none), and deletes the one it used before (`old`) when no
    application of this console uses it any more: the folder is shared by every
    organisation (`states_root` holds their state folders), so another's reference or state
    keeps it."""

    def snapshot(planned: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return (str(planned["repo"]), str(planned["commit"])) if planned else None

    owner = str(folder.absolute())
    in_states = {
        found
        for path in states_root.glob(f"*/*/{STATE_FILE}")
        if path.parent.absolute() != Path(owner)
        and (found := snapshot(_planned_download(path))) is not None
    }
    # A downloads folder that cannot be written loses only this record (the states above
    # keep a snapshot in use either way); the download itself then says why it failed.
    with contextlib.suppress(OSError):
        space.refer(
            rt.configured_downloads_dir(), owner, snapshot(download), snapshot(old), in_states
        )


def write_plan(state: AppState, folder: Path) -> str:
    """The download launcher's plan, in the application's private state folder `folder`."""
    planned = dict(state.download or {})
    planned["downloads_dir"] = str(rt.configured_downloads_dir().absolute())
    planned["runtime"] = state.runtime  # infinity's snapshot is checked (model_files)
    # The disk the downloads folder keeps free, and the most one download may take: the
    # weights a CPU runtime holds in this machine's memory (machine_check decides both).
    planned["reserve"] = downloads_reserve(rt.configured_downloads_dir())
    planned["max_bytes"] = machine().memory
    path = proc.private_dir(folder) / DOWNLOAD_PLAN
    temporary = path.with_name(f".{DOWNLOAD_PLAN}.tmp")
    with open(temporary, "w", opener=proc.private_opener) as handle:
        handle.write(json.dumps(planned))
    os.replace(temporary, path)
    return str(path)
