"""The audit log: who changed which key, policy, domain, member, application, cluster or profile,
who logged in or failed to, and who made or used a password link; when, and from which
address. `record` is the one way in; the request's address comes from `origin`, which the
membership middleware sets for each request and the command line sets to "cli"."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from accesspolicies.models import AuditEntry, Organization

CLI = "cli"
DETAIL_TEXT_MAX = 200  # a detail value longer than this is cut: the log is not a data store


@dataclass(frozen=True)
class Origin:
    address: str | None = None  # the client's IP address; None from the command line
    via: str = ""  # "web", "api" or "cli"


NO_ORIGIN = Origin()
_origin: ContextVar[Origin] = ContextVar("audit_origin", default=NO_ORIGIN)  # noqa: B039 - frozen


@contextlib.contextmanager
def origin(address: str | None, via: str) -> Iterator[None]:
    """Changes recorded inside come from `address` through `via`."""
    token = _origin.set(Origin(_valid_address(address), via))
    try:
        yield
    finally:
        _origin.reset(token)


def request_origin(request) -> contextlib.AbstractContextManager[None]:
    via = "api" if request.path.startswith("/api/") else "web"
    return origin(request.META.get("REMOTE_ADDR"), via)


def cli_origin() -> contextlib.AbstractContextManager[None]:
    return origin(None, CLI)


def _valid_address(address: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address(address)) if address else None
    except ValueError:
        return None


def _bounded(detail: dict | None) -> dict:
    out = {}
    for key, value in (detail or {}).items():
        if isinstance(value, str) and len(value) > DETAIL_TEXT_MAX:
            value = value[:DETAIL_TEXT_MAX] + "…"
        out[str(key)[:64]] = value
    return out


def record(
    org: Organization,
    actor,
    action: str,
    obj_type: str,
    obj_name: str,
    detail: dict | None = None,
    address: str | None = None,
    actor_name: str | None = None,
) -> AuditEntry:
    """Write one entry. `actor` is the user acting (None for the system, or for someone not
    signed in, whom `actor_name` describes); `address` defaults to the current request's."""
    current = _origin.get()
    via = current.via
    name = actor.get_username() if actor is not None else (actor_name or "system")
    if via == CLI:
        name = f"{name} (cli)" if actor is not None else CLI
    detail = _bounded(detail)
    if via:
        detail.setdefault("via", via)
    return AuditEntry.objects.create(
        organization=org,
        actor=actor,
        actor_name=name[:150],
        action=action[:64],
        object_type=obj_type[:32],
        object_name=str(obj_name)[:200],
        detail=detail,
        address=_valid_address(address) or current.address,
    )
