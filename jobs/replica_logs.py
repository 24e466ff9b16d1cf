"""An application's replicas and the tail of each one's log, bounded and with secrets taken out:
pod logs through the Kubernetes API on a cluster, the process's log file on the local backend.

What is redacted: every value of the replica's environment whose name says it is a secret
(TOKEN, KEY, SECRET, PASSWORD...), the Hugging Face token the application's profile gives it,
the same values of the console's own environment (the operator's tokens), and anything shaped
like a known token (hf_..., sdk_/sdp_ keys, Bearer credentials) whoever wrote it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs.backends.local.command import SECRET_WORDS

DEFAULT_LINES = 200
MAX_LINES = 2000
MAX_BYTES = 256 * 1024
MAX_LINE_CHARS = 4000
REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would blank out ordinary words
# Settings of the console that hold credentials though their names do not say so.
CREDENTIAL_NAMES = frozenset({"DATABASE_URL", "REDIS_URL", "CHANNEL_REDIS_URL"})
TOKEN_SHAPES = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}|\bsd[kp]_[A-Za-z0-9_\-]{16,}|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,}=*"
)
# The longest token shape looked at whole; a longer one is still taken out, its tail left.
TOKEN_SHAPE_CHARS = 512
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


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return upper in CREDENTIAL_NAMES or any(word in upper for word in SECRET_WORDS)


def secret_values(*environments: Mapping[str, str], extra: Iterable[str | None] = ()) -> set[str]:
    """The values to take out of logs: those of secret-looking names, and `extra` ones."""
    found = {v for env in environments for k, v in env.items() if looks_secret(k) and v}
    found |= {v for v in extra if v}
    return {v for v in found if len(v) >= MIN_SECRET_CHARS}


def redact(lines: Iterable[str], secrets: Iterable[str]) -> list[str]:
    """The lines with every secret value and token-shaped word replaced (longest first, so a
    value containing another is taken out whole); each line cut to MAX_LINE_CHARS after, so
    the cut never leaves the first characters of a secret that redaction would not know."""
    ordered = sorted(set(secrets), key=len, reverse=True)
    # Enough beyond the cut for any secret or token shape that starts before it.
    margin = max([len(v) for v in ordered] + [TOKEN_SHAPE_CHARS])
    out = []
    for line in lines:
        line = line[: MAX_LINE_CHARS + margin]
        for value in ordered:
            if value in line:
                line = line.replace(value, REDACTED)
        out.append(TOKEN_SHAPES.sub(REDACTED, line)[:MAX_LINE_CHARS])
    return out


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


def operator_secrets() -> set[str]:
    """The console's own secret-looking values (the operator's HF token among them)."""
    return secret_values(os.environ)


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
    from jobs.backends import local_runner

    return local_runner(application.organization.slug)


def _refused(replica: str, known: list[str]) -> LogsRefused:
    shown = repr(replica if len(replica) <= 63 else replica[:63] + "…")
    listed = ", ".join(known[:10]) or "none yet"
    return LogsRefused(
        f"replica: {shown} is not a replica of this application; pick one of: {listed}."
    )


def _local_tail(application, replica: str | None, lines: int) -> Tail:
    from jobs.backends import application_token

    runner = _runner(application)
    known = [str(r.index) for r in runner.observe(application.name).replicas]
    chosen = replica if replica not in (None, "") else (known[0] if known else "0")
    if chosen not in known and not (chosen == "0" and not known):
        raise _refused(chosen, known)
    raw = runner.tail(application.name, lines, int(chosen))
    token = application_token(application.organization.slug, application.name)
    secrets = operator_secrets() | secret_values(extra=[token])
    kept, truncated = within_bytes(redact(raw, secrets))
    return Tail(chosen, kept, truncated)


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


def _pod_tail(application, replica: str | None, lines: int) -> Tail:
    from jobs.backends.kubernetes.errors import BackendError

    pods = _pods(application)
    names = [_pod_name(p) for p in pods]
    chosen = replica if replica not in (None, "") else (names[0] if names else "")
    if chosen not in names:
        if not names and replica in (None, ""):
            return Tail("", [], False)
        raise _refused(chosen, names)
    pod = pods[names.index(chosen)]
    namespace = application.manifest["spec"]["namespace"]
    container = _container(pod).get("name")
    try:
        data = _client(application).pod_log(chosen, namespace, container, lines, MAX_BYTES)
    except BackendError as error:
        return Tail(chosen, [f"The log of {chosen} cannot be read: {error.reason}"], False)
    text = data.decode("utf-8", errors="replace")
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    truncated = len(data) >= MAX_BYTES
    if truncated and raw:
        raw = raw[:-1]  # the kubelet applies limitBytes after tailLines: the last line is cut
    secrets = operator_secrets() | secret_values(_pod_env(pod))
    kept, cut = within_bytes(redact(raw[-lines:], secrets))
    return Tail(chosen, kept, truncated or cut)
