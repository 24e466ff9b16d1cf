"""An application's replicas and the tail of each one's log, bounded and with secrets taken out:
pod logs through the Kubernetes API on a cluster, the process's log file on the local backend.

What is redacted: every value of the replica's environment whose name says it is a secret
(TOKEN, KEY, SECRET, PASSWORD...), the Hugging Face token the application's profile gives it,
the same values of the console's own environment (the operator's tokens), and anything shaped
like a known token (hf_..., sdk_/sdp_ keys, Bearer credentials) whoever wrote it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from jobs.backends.redaction import operator_secrets, redact, secret_values

DEFAULT_LINES = 200
MAX_LINES = 2000
MAX_BYTES = 256 * 1024
KSERVE_CONTAINER = "kserve-container"


class LogsRefused(ValueError):
    """A bad request for logs: the message names the parameter, the value and what is accepted."""


class LogsUnavailable(RuntimeError):
    """The cluster did not answer (or refused) the listing of the replicas: why, and what to do."""


@dataclass(frozen=True)
class ReplicaRef:
    """One replica to pick: `key` is what the picker sends back (an index, a pod name)."""

    key: str
    label: str
    image: str = ""


@dataclass(frozen=True)
class Tail:
    replica: str
    lines: list[str]
    truncated: bool  # fewer lines than asked for because of the byte bound
    cursor: str | None = None  # follow(): where the next call goes on from


def bounded_lines(value: str | None) -> int:
    """The `lines` parameter: 1 to MAX_LINES, DEFAULT_LINES when not given."""
    if value in (None, ""):
        return DEFAULT_LINES
    try:
        lines = int(value)
    except ValueError:
        lines = 0
    if not 1 <= lines <= MAX_LINES:
        shown = repr(value if len(value) <= 20 else value[:20] + "…")
        raise LogsRefused(f"lines: {shown} is not a whole number from 1 to {MAX_LINES}.")
    return lines


def within_bytes(lines: list[str], limit: int = MAX_BYTES) -> tuple[list[str], bool]:
    """The last lines that fit in `limit` bytes (UTF-8), and whether any were left out."""
    kept, size = [], 0
    for line in reversed(lines):
        size += len(line.encode()) + 1
        if size > limit:
            return list(reversed(kept)), True
        kept.append(line)
    return list(reversed(kept)), False


# ---- the backends ----


def replicas(application) -> list[ReplicaRef]:
    """The replicas to pick from: the local backend's replica indexes, a cluster's pods."""
    if _is_local(application):
        runner = _runner(application)
        status = runner.observe(application.name)
        return [
            ReplicaRef(str(r.index), f"replica {r.index} ({r.state}, port {r.port})")
            for r in status.replicas
        ]
    return [
        ReplicaRef(_pod_name(pod), f"{_pod_name(pod)} ({_pod_phase(pod)})", _pod_image(pod))
        for pod in _pods(application)
    ]


def tail(application, replica: str | None, lines: int) -> Tail:
    """The last `lines` lines of the replica's log (the first replica when none is named),
    at most MAX_BYTES, redacted. LogsRefused when `replica` is not one of its replicas."""
    if _is_local(application):
        return _local_tail(application, replica, lines)
    return _pod_tail(application, replica, lines)


def _is_local(application) -> bool:
    cluster = application.profile.cluster
    return cluster.backend == cluster.Backend.LOCAL


def _runner(application):
    from jobs.backends.local.backend import local_runner

    return local_runner(application.organization.slug)


def _refused(replica: str, known: list[str]) -> LogsRefused:
    shown = repr(replica if len(replica) <= 63 else replica[:63] + "…")
    listed = ", ".join(known[:10]) or "none yet"
    return LogsRefused(
        f"replica: {shown} is not a replica of this application; pick one of: {listed}."
    )


def follow(application, replica: str | None, lines: int, after: str | None) -> Tail:
    """Like tail(), with a cursor to follow the log by: without `after`, the last `lines`
    complete lines and the cursor after them; with it, the lines written since that cursor
    (the oldest first, at most `lines`) and the next cursor. Each line is read once however
    often the same text repeats. LogsRefused for a cursor this log never gave."""
    if _is_local(application):
        return _local_follow(application, replica, lines, after)
    return _pod_follow(application, replica, lines, after)


# A cursor is a letter and two whole numbers: b<offset>.<generation> for the local backend's
# log file (jobs.backends.local.processes.LogCursor), t<nanoseconds>.<count> for a pod's (the
# kubelet's timestamps, below). Read here, and only here, for both: ASCII digits only (str.isdigit
# takes "²", which int() then refuses), at most 19 of them, no more than a signed 64-bit number
# (every offset, file time and kubelet time fits; a seek takes no more).
CURSOR_SHAPES = {"b": "b<digits>.<digits>", "t": "t<digits>.<digits>"}
CURSOR_NUMBER = re.compile(r"[0-9]{1,19}")
MAX_CURSOR_NUMBER = 2**63 - 1
MAX_CURSOR_CHARS = 1 + 19 + 1 + 19


def parse_cursor(after: str, kind: str) -> tuple[int, int]:
    """The two numbers of a cursor of `kind` ("b": the local backend's log, "t": a pod's);
    LogsRefused naming `after`, the shape its cursors have and what to send, for anything else."""
    first, dot, second = after[1:].partition(".")
    numbers = (first, second)
    if (
        after[:1] != kind
        or not dot
        or not all(CURSOR_NUMBER.fullmatch(n) for n in numbers)
        or any(int(n) > MAX_CURSOR_NUMBER for n in numbers)
    ):
        # The value is shown only as long as a cursor can be (escaped): never a long one back.
        shown = repr(after) if len(after) <= MAX_CURSOR_CHARS else f"{len(after)} characters"
        raise LogsRefused(
            f"after: {shown} is not a cursor this log gave: its cursors read "
            f"{CURSOR_SHAPES[kind]} (at most {MAX_CURSOR_CHARS} characters). Send the cursor of "
            "the previous answer unchanged, or no after for the last lines."
        )
    return int(first), int(second)


def _local_replica(application, replica: str | None):
    runner = _runner(application)
    known = [str(r.index) for r in runner.observe(application.name).replicas]
    chosen = replica if replica not in (None, "") else (known[0] if known else "0")
    if chosen not in known and not (chosen == "0" and not known):
        raise _refused(chosen, known)
    return runner, chosen


def _local_secrets(application) -> set[str]:
    from jobs.backends.local.backend import application_token

    token = application_token(application.organization.slug, application.name)
    return operator_secrets() | secret_values(extra=[token])


def _local_tail(application, replica: str | None, lines: int) -> Tail:
    runner, chosen = _local_replica(application, replica)
    raw = runner.tail(application.name, lines, int(chosen))
    kept, truncated = within_bytes(redact(raw, _local_secrets(application)))
    return Tail(chosen, kept, truncated)


def _local_follow(application, replica: str | None, lines: int, after: str | None) -> Tail:
    from jobs.backends.local.processes import LogCursor

    runner, chosen = _local_replica(application, replica)
    cursor = LogCursor(*parse_cursor(after, "b")) if after else None
    raw, next_cursor = runner.follow(application.name, int(chosen), lines, cursor, MAX_BYTES)
    kept = redact(raw, _local_secrets(application))
    if cursor is None:  # the last lines: the newest that fit (the cursor is after them all)
        kept, truncated = within_bytes(kept)
        return Tail(chosen, kept, truncated, str(next_cursor))
    return Tail(chosen, kept, False, str(next_cursor))  # read at most MAX_BYTES already


def _client(application):
    from jobs.backends.kubernetes.backend import client_for

    return client_for(application.profile.cluster)


def _pods(application) -> list[dict]:
    from jobs.backends.kubernetes.errors import BackendError

    # A filled manifest names its namespace; one saved before that came from the profile.
    namespace = application.manifest["spec"].get("namespace") or application.profile.namespace
    try:
        return _client(application).replica_pods(
            application.name, namespace, organization=application.organization.slug
        )
    except BackendError as error:
        cluster = application.profile.cluster.name
        raise LogsUnavailable(
            f"The replicas of {application.name} cannot be listed on cluster {cluster}: "
            f"{error.reason} Try again once the cluster answers; an admin can check its "
            "connection under Clusters."
        ) from None


def _pod_name(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _pod_phase(pod: Mapping) -> str:
    return str((pod.get("status") or {}).get("phase") or "Unknown")


def _container(pod: Mapping) -> Mapping:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return next((c for c in containers if c.get("name") == KSERVE_CONTAINER), containers[0])


def _pod_image(pod: Mapping) -> str:
    """The image its serving container runs: as the kubelet reports it, else as specified."""
    container = _container(pod)
    for seen in (pod.get("status") or {}).get("containerStatuses") or []:
        if seen.get("name") == container.get("name") and seen.get("image"):
            return str(seen["image"])
    return str(container.get("image") or "")


def _pod_env(pod: Mapping) -> dict[str, str]:
    """The literal values of every container's environment (secretKeyRef values are not in
    the pod spec; the Secret's value would only appear in a log the server wrote)."""
    env = {}
    spec = pod.get("spec") or {}
    for container in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        for item in container.get("env") or []:
            if isinstance(item, Mapping) and isinstance(item.get("value"), str):
                env[str(item.get("name") or "")] = item["value"]
    return env


def _pod_chosen(application, replica: str | None) -> tuple[Mapping | None, str]:
    """The pod to read (None when there is none yet and none was named) and its name."""
    pods = _pods(application)
    names = [_pod_name(p) for p in pods]
    chosen = replica if replica not in (None, "") else (names[0] if names else "")
    if chosen not in names:
        if not names and replica in (None, ""):
            return None, ""
        raise _refused(chosen, names)
    return pods[names.index(chosen)], chosen


def _pod_lines(
    application, pod: Mapping, chosen: str, lines: int, timestamps: bool
) -> tuple[list[str], bool] | str:
    """The pod's last log lines (whole ones) and whether limitBytes cut them; or why the log
    cannot be read."""
    from jobs.backends.kubernetes.errors import BackendError

    namespace = application.manifest["spec"]["namespace"]
    container = _container(pod).get("name")
    try:
        data = _client(application).pod_log(
            chosen, namespace, container, lines, MAX_BYTES, timestamps
        )
    except BackendError as error:
        return f"The log of {chosen} cannot be read: {error.reason}"
    raw = data.decode("utf-8", errors="replace").split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    truncated = len(data) >= MAX_BYTES
    if truncated and raw:
        raw = raw[:-1]  # the kubelet applies limitBytes after tailLines: the last line is cut
    return raw[-lines:], truncated


def _pod_tail(application, replica: str | None, lines: int) -> Tail:
    pod, chosen = _pod_chosen(application, replica)
    if pod is None:
        return Tail("", [], False)
    read = _pod_lines(application, pod, chosen, lines, timestamps=False)
    if isinstance(read, str):
        return Tail(chosen, [read], False)
    raw, truncated = read
    secrets = operator_secrets() | secret_values(_pod_env(pod))
    kept, cut = within_bytes(redact(raw, secrets))
    return Tail(chosen, kept, truncated or cut)


# A pod's log is followed by the kubelet's timestamps (`timestamps=true`, RFC3339Nano): the
# cursor is the last line's time and how many lines carry that very time (one write of
# several lines gives them all the same), "t<nanoseconds>.<count>".
POD_FOLLOW_LINES = MAX_LINES  # lines asked for when following: more since the last call are lost


def _nanoseconds(stamp: str) -> int | None:
    """2026-12-01T21:17:34.123456789Z (or +00:00) as nanoseconds since the epoch."""
    from datetime import datetime

    seconds, dot, rest = stamp.partition(".")
    digits = ""
    if dot:
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        zone = rest[len(digits) :]
    else:
        seconds, zone = stamp[:19], stamp[19:]
    try:
        moment = datetime.fromisoformat(seconds + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    fraction = int((digits + "000000000")[:9]) if digits else 0
    return int(moment.timestamp()) * 1_000_000_000 + fraction


def _stamped(raw: list[str]) -> list[tuple[int, str]]:
    """(time, text) of each `timestamps=true` line; a line without a time takes the last."""
    out, last = [], 0
    for line in raw:
        stamp, _, text = line.partition(" ")
        when = _nanoseconds(stamp)
        if when is None:
            when, text = last, line
        out.append((when, text))
        last = when
    return out


def _pod_follow(application, replica: str | None, lines: int, after: str | None) -> Tail:
    since = parse_cursor(after, "t") if after else None
    pod, chosen = _pod_chosen(application, replica)
    if pod is None:
        return Tail("", [], False, after)
    read = _pod_lines(
        application, pod, chosen, POD_FOLLOW_LINES if since else lines, timestamps=True
    )
    if isinstance(read, str):
        return Tail(chosen, [read], False, after)
    stamped = _stamped(read[0])
    if since is not None:
        when, count = since
        seen_at_cursor = 0
        fresh = []
        for stamp, text in stamped:
            if stamp < when:
                continue
            if stamp == when and seen_at_cursor < count:
                seen_at_cursor += 1
                continue
            fresh.append((stamp, text))
        stamped = fresh[:lines]
    if not stamped:
        return Tail(chosen, [], False, after)
    last = stamped[-1][0]
    # Lines at the last time already passed (before this answer, or in it).
    at_last = sum(1 for stamp, _ in stamped if stamp == last)
    if since is not None and last == since[0]:
        at_last += since[1]
    elif since is None and at_last == len(stamped) == lines:
        # The last lines all came in one write that may have begun before them: count it
        # whole, or the next call would give its first lines again.
        wider = _pod_lines(application, pod, chosen, POD_FOLLOW_LINES, timestamps=True)
        if not isinstance(wider, str):
            at_last = sum(1 for stamp, _ in _stamped(wider[0]) if stamp == last)
    secrets = operator_secrets() | secret_values(_pod_env(pod))
    kept = redact([text for _, text in stamped], secrets)
    return Tail(chosen, kept, read[1], f"t{last}.{at_last}")
