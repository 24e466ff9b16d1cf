"""Processes, process groups, ports and log files for the local backend (Linux /proc).

Each model server runs in a session of its own, so its process group holds the server and
every worker it forks; stopping it signals the whole group, SIGTERM first, SIGKILL after a
grace period, and waits until no member is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
LOOPBACK = "127.0.0.1"
POLL_SECONDS = 0.05
KILL_WAIT_SECONDS = 5.0
# The state, logs and locks hold commands, ports and the servers' output: the console's user
# only, whatever umask the process was started with (the backend also runs without Django).
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_opener(path: str, flags: int) -> int:
    """An `opener` for open(): a file it creates is 0600 from the start."""
    return os.open(path, flags, PRIVATE_FILE_MODE)


def private_dir(path: Path) -> Path:
    """`path` and any missing parents, each created 0700."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=PRIVATE_DIR_MODE)
            folder.chmod(PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask
    return path


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that tell a process apart from a later one."""

    state: str
    pgrp: int
    ppid: int
    start_ticks: int  # since boot: with the pid, names one process for the machine's uptime
    # A zombie's wait status (field 52, Linux 3.5+): how it ended, readable by any process of
    # its user until its parent reaps it. None when the kernel does not say.
    wait_status: int | None = None


def boot_id() -> str | None:
    """This boot's id: a pid and start time recorded before a reboot name nothing now."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def parse_stat(text: str) -> ProcStat:
    # The command name sits in parentheses and may hold spaces or ')': split at the last one.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        start_ticks=int(fields[19]),
        wait_status=int(fields[49]) if len(fields) > 49 else None,
    )


def any_stat(pid: int) -> ProcStat | None:
    """The process's stat, a zombie's too; None when the pid is gone."""
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def proc_stat(pid: int) -> ProcStat | None:
    """The process's stat, or None when it is gone or a zombie (it has exited)."""
    stat = any_stat(pid)
    return None if stat is None or stat.state in ("Z", "X") else stat


def exit_code_of_exited(pid: int, start_ticks: int | None) -> int | None:
    """How the process we started as `pid` at `start_ticks` ended, as Popen.returncode says
    it (-N for signal N), while it waits to be reaped by its parent: another console process
    (the reconciler beside the web process that started it) learns it this way. None when
    the pid is not that exited process any more (reaped, or not ours)."""
    stat = any_stat(pid)
    if stat is None or stat.state != "Z" or stat.wait_status is None:
        return None
    if start_ticks is None or stat.start_ticks != start_ticks:
        return None
    status = stat.wait_status
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


def on_its_way_out(
    stat: ProcStat | None, cmdline: list[str] | None, start_ticks: int | None
) -> bool:
    """The process we started is exiting but not a zombie yet: its memory, and with it its
    command line, is gone, while its exit status is not readable until it becomes one. Seen
    from another console process in that moment it neither runs its command nor has ended."""
    if stat is None or stat.state in ("Z", "X") or cmdline:
        return False
    return start_ticks is not None and stat.start_ticks == start_ticks


def exiting(pid: int, start_ticks: int | None) -> bool:
    return on_its_way_out(any_stat(pid), proc_cmdline(pid), start_ticks)


def proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]] or None


def cmdline_matches(cmdline: list[str] | None, command: list[str]) -> bool:
    """Whether a running cmdline is `command`. A script started by name shows up as
    `<interpreter> <path of script> <args>` (vllm is a Python script), so the arguments must
    end the cmdline and the program's base name must appear before them."""
    if not cmdline or not command:
        return False
    if cmdline == command:
        return True
    args = command[1:]
    if len(cmdline) < len(args) + 1 or (args and cmdline[-len(args) :] != args):
        return False
    program = os.path.basename(command[0])
    head = cmdline[: len(cmdline) - len(args)]
    return any(os.path.basename(part) == program for part in head)


def runs_command(pid: int, start_ticks: int | None, command: list[str]) -> bool:
    """The pid is still the process we started: same start time, same command line."""
    stat = proc_stat(pid)
    if stat is None or (start_ticks is not None and stat.start_ticks != start_ticks):
        return False
    return cmdline_matches(proc_cmdline(pid), command)


def group_members(groups: Mapping[int, int | None]) -> dict[int, list[int]]:
    """Live (non-zombie) members of each group {pgid: start ticks of its leader}, in one pass
    over /proc; groups with none are left out.

    While any member lives, Linux keeps the group id from being handed out as a new pid; so
    when a live process owns that pid with another start time, the old group is empty."""
    wanted = set()
    for pgid, ticks in groups.items():
        leader = proc_stat(pgid)
        if leader is None or ticks is None or leader.start_ticks == ticks:
            wanted.add(pgid)
    members: dict[int, list[int]] = {}
    if not wanted:
        return members
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat.pgrp in wanted:
                members.setdefault(stat.pgrp, []).append(int(entry.name))
    return members


def spawn(
    command: list[str], env: Mapping[str, str], log_path: Path, cwd: str | None = None
) -> subprocess.Popen:
    """Start `command` with exactly `env`, in a new session (its own process group), its
    output appended to the log.

    O_APPEND lets the log be truncated under the running process (see cap_log)."""
    with open(log_path, "ab", opener=private_opener) as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )


def _kill(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _reap(popens: Iterable[subprocess.Popen]) -> None:
    for popen in popens:
        popen.poll()


@dataclass(frozen=True)
class Target:
    """A process group to stop: its leader, when it started, and our handle if it is our child."""

    pgid: int
    start_ticks: int | None
    popen: subprocess.Popen | None = None


def terminate(targets: list[Target], grace: float) -> None:
    """SIGTERM every group, SIGKILL what is left after `grace` seconds, wait until none is left.

    All groups share one grace period, so stopping n replicas takes one grace, not n. The
    members found are signalled one by one (not by group id, which could outlive them), and
    any member that appears later is signalled too."""
    popens = [t.popen for t in targets if t.popen is not None]
    groups = {t.pgid: t.start_ticks for t in targets}

    def remaining() -> set[int]:
        _reap(popens)
        return {pid for pids in group_members(groups).values() for pid in pids}

    left = remaining()
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT_SECONDS)):
        signalled: set[int] = set()
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            _kill(left - signalled, signum)
            signalled |= left
            time.sleep(POLL_SECONDS)
            left = remaining()
    for popen in popens:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=KILL_WAIT_SECONDS)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port(prefer: int | None = None, avoid: Iterable[int] = ()) -> int:
    """A loopback port nothing listens on: `prefer` when it is free (a stable endpoint across
    restarts), else one the kernel picks. Another program may still take it before the
    server binds; the server then fails and says so in its log."""
    avoid = set(avoid)
    if prefer and prefer not in avoid and port_is_free(prefer):
        return prefer
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


def cap_log(path: Path, max_bytes: int) -> None:
    """Keep a log under about `max_bytes`: past half of it, the log moves to <log>.1 (replacing
    the older half) and is emptied in place. The server keeps writing to the same open file
    (O_APPEND), which a rename would not allow; a line written during the copy may be lost."""
    try:
        if path.stat().st_size <= max_bytes // 2:
            return
        with open(path, "rb") as src, open(rotated(path), "wb", opener=private_opener) as dst:
            dst.write(src.read())
        os.truncate(path, 0)
    except FileNotFoundError:
        return


def rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def _last_lines(path: Path, n: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            window = min(size, max(64 * 1024, n * 2048))
            handle.seek(size - window)
            data = handle.read()
    except FileNotFoundError:
        return []
    lines = data.decode(errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if window < size and lines:
        lines = lines[1:]  # the window starts mid-line
    # A progress bar rewrites its line with \r: keep what a terminal would show.
    return [line.rsplit("\r", 1)[-1] for line in lines[-n:]]


def tail_lines(path: Path, n: int) -> list[str]:
    """The last n lines of the log and, when it holds fewer, of its rotated half before it."""
    if n <= 0:
        return []
    lines = _last_lines(path, n)
    if len(lines) < n:
        lines = _last_lines(rotated(path), n - len(lines)) + lines
    return lines


# --- following a log: a cursor, so each line is read once ---------------------------------
#
# A byte offset into the log, and which rotation it belongs to (the rotated copy's mtime: a
# rotation rewrites it). cap_log copies the log to <log>.1 byte for byte before emptying it,
# so an offset taken before a rotation still points into the copy: the rest of the copy, then
# the new log, is exactly what was written after it. Only complete lines are read; a line
# still being written waits for its newline.


@dataclass(frozen=True)
class LogCursor:
    """Written as b<offset>.<generation>; read back by jobs.overview.replica_logs.parse_cursor."""

    offset: int
    generation: int

    def __str__(self) -> str:
        return f"b{self.offset}.{self.generation}"


def _generation(path: Path) -> int:
    try:
        return rotated(path).stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _shown(lines: list[str]) -> list[str]:
    # A progress bar rewrites its line with \r: keep what a terminal would show.
    return [line.rsplit("\r", 1)[-1] for line in lines]


def _complete_lines(
    path: Path, offset: int, max_lines: int, max_bytes: int, final: bool
) -> tuple[list[str], int]:
    """Whole lines from `offset` (at most max_lines, at most max_bytes), and the bytes they
    take. `final`: the file grows no more (a rotated copy), so a last line without a newline
    counts; a line longer than max_bytes is taken in pieces rather than never."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(max_bytes)
    except FileNotFoundError:
        return [], 0
    found: list[bytes] = []
    used = 0
    while len(found) < max_lines:
        newline = data.find(b"\n", used)
        if newline == -1:
            rest = data[used:]
            at_end = final and len(data) < max_bytes
            if rest and (at_end or (used == 0 and len(data) == max_bytes)):
                found.append(rest)
                used = len(data)
            break
        found.append(data[used:newline])
        used = newline + 1
    return _shown([line.decode(errors="replace") for line in found]), used


def tail_with_cursor(path: Path, n: int) -> tuple[list[str], LogCursor]:
    """The last n lines (across the rotation) and the cursor after the last complete one: a
    line still being written (a progress bar's) shows here, and again once it is complete."""
    for _ in range(3):  # a rotation between the reads: read again
        generation = _generation(path)
        lines, end = _last_lines_and_end(path, n)
        if len(lines) < n:
            lines = _last_lines(rotated(path), n - len(lines)) + lines
        if _generation(path) == generation:
            break
    return lines, LogCursor(end, generation)


def _last_lines_and_end(path: Path, n: int) -> tuple[list[str], int]:
    """The last n lines of the log, as _last_lines reads them, from one read; and the offset
    just after its last newline within that read."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            window = min(size, max(64 * 1024, n * 2048))
            handle.seek(size - window)
            data = handle.read(window)
    except FileNotFoundError:
        return [], 0
    newline = data.rfind(b"\n")
    # No newline in the window: one long line goes on (taken as read), or none is whole yet.
    end = size - window + newline + 1 if newline >= 0 else (size if window < size else 0)
    lines = data.decode(errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if window < size and lines:
        lines = lines[1:]  # the window starts mid-line
    return _shown(lines[-n:] if n > 0 else []), end


def lines_after(
    path: Path, cursor: LogCursor, max_lines: int, max_bytes: int
) -> tuple[list[str], LogCursor]:
    """The complete lines written after `cursor` (the oldest first, at most max_lines and about
    max_bytes: the cursor returned is after the last of them, so the next call goes on)."""
    generation = _generation(path)
    if generation != cursor.generation:
        # Rotated since: the rest of the copy first (an offset past its end: a second
        # rotation replaced it, and what it held is gone).
        copy = rotated(path)
        size = copy.stat().st_size if copy.exists() else 0
        start = min(cursor.offset, size)
        rest, used = _complete_lines(copy, start, max_lines, max_bytes, final=True)
        if start + used < size:
            return rest, LogCursor(start + used, cursor.generation)
        if len(rest) == max_lines:
            return rest, LogCursor(0, generation)
        more, used = _complete_lines(path, 0, max_lines - len(rest), max_bytes, final=False)
        return rest + more, LogCursor(used, generation)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    start = cursor.offset if cursor.offset <= size else 0  # emptied without a copy: anew
    found, used = _complete_lines(path, start, max_lines, max_bytes, final=False)
    return found, LogCursor(start + used, generation)
