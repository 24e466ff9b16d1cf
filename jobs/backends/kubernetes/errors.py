"""Kubernetes API failures in plain words: every ApiException and urllib3 error the client
raises becomes a BackendError saying what went wrong, on which object, and what to do next.
Nothing here talks to a cluster; `explain` is a pure function of the failure and its call.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from .kinds import Kind

NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\w+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)")?'
)
_CONFLICT_MANAGER = re.compile(r'conflicts? with "([^"]+)"')


class BackendError(Exception):
    """A cluster operation that failed: `reason` says what and where, `next_step` what to do,
    `status` the HTTP status the API server answered (None when it did not answer)."""

    def __init__(self, reason: str, next_step: str, status: int | None = None) -> None:
        self.reason = reason.rstrip(". ")
        self.next_step = next_step
        self.status = status
        super().__init__(f"{self.reason}. {next_step}")

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "next_step": self.next_step, "status": self.status}


class NotFound(BackendError):
    """The object is not on the cluster (its kind is served)."""


class Gone(BackendError):
    """410: the watch's resourceVersion is older than the API server keeps; list again and
    watch from the list's resourceVersion."""


class Unreachable(BackendError):
    """The API server did not answer: down, unreachable, or too slow."""


@dataclass(frozen=True)
class Call:
    """The operation that failed, to name it in the error."""

    verb: str  # as RBAC says it: get, list, watch, create, patch, delete
    kind: Kind
    namespace: str | None = None
    name: str | None = None

    @property
    def what(self) -> str:
        return self.kind.describe(self.namespace, self.name)


@dataclass(frozen=True)
class ApiTarget:
    """Which API server, and where its address came from."""

    host: str
    source: str  # "kubeconfig /etc/kube.yaml (context prod)" or "in-cluster service account"
    connect_timeout: float
    read_timeout: float


@contextlib.contextmanager
def translated(call: Call, api: ApiTarget) -> Iterator[None]:
    """Run a client call; its failure comes out as a BackendError."""
    try:
        yield
    except BackendError:
        raise
    except (ApiException, *NETWORK_ERRORS) as exc:
        raise explain(exc, call, api) from exc


def explain(exc: BaseException, call: Call, api: ApiTarget) -> BackendError:
    """The BackendError for a failed client call."""
    if isinstance(exc, ApiException) and exc.status:
        return from_status(status_body(exc), exc.status, call, api)
    return _unreachable(exc, api)


def status_body(exc: ApiException) -> dict[str, Any]:
    """The Status object the API server sent, or what can be said without one."""
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"message": (exc.body or exc.reason or "").strip()}


def from_status(status: dict[str, Any], code: int, call: Call, api: ApiTarget) -> BackendError:
    """The BackendError for a Status the server answered with (also a watch's ERROR event)."""
    message = str(status.get("message") or status.get("reason") or f"HTTP {code}")
    details = status.get("details") if isinstance(status.get("details"), dict) else {}
    if code == 401:
        return BackendError(
            f"The Kubernetes API at {api.host} did not accept ServeDeck's credentials ({message})",
            f"Renew the token or client certificate of the {api.source} and try again.",
            code,
        )
    if code == 403:
        return _quota(message, call) if "exceeded quota" in message else _forbidden(message, call)
    if code == 404:
        return _not_found(message, details, call)
    if code == 409:
        return _conflict(message, call)
    if code == 410:
        return Gone(
            f"The watch of {call.what} started from a resourceVersion the API server no "
            f"longer keeps ({message})",
            "List again and watch from the list's resourceVersion.",
            code,
        )
    if code == 422:
        return _invalid(message, details, call)
    if code == 400:
        return BackendError(
            f"The cluster refused the request for {call.what}: {message}",
            "Check the object in the dry run; if it looks right, report this to the ServeDeck "
            "maintainers with the message.",
            code,
        )
    return BackendError(
        f"The Kubernetes API at {api.host} failed to {call.verb} {call.what} "
        f"({code} {status.get('reason') or ''}: {message})".replace(" :", ":"),
        "Try again in a minute; if it keeps failing, check the API server's health.",
        code,
    )


def _forbidden(message: str, call: Call) -> BackendError:
    said = _FORBIDDEN.search(message)
    user = said["user"] if said else "the console's identity"
    verb = said["verb"] if said else call.verb
    plural = said["resource"] if said else call.kind.plural
    group = said["group"] if said and said["group"] is not None else call.kind.group
    namespace = (said["namespace"] if said else None) or (
        call.namespace if call.kind.namespaced else None
    )
    resource = f"{plural}.{group}" if group else plural
    where = f"in namespace {namespace}" if namespace else "at cluster scope"
    role = f"a Role in namespace {namespace}" if namespace else "a ClusterRole"
    return BackendError(
        f"ServeDeck ({user}) may not {verb} {resource} {where}",
        f'Grant {user} {role} with the rule apiGroups: ["{group}"], resources: ["{plural}"], '
        f'verbs: ["{verb}"] (and bind it), then try again.',
        403,
    )


def _quota(message: str, call: Call) -> BackendError:
    said = message[message.index("exceeded quota") :]
    where = f"namespace {call.namespace}" if call.namespace else "its namespace"
    return BackendError(
        f"{call.what}: {said}",
        f"Lower the request (replicas, GPUs, CPU or memory) or ask an admin to raise the "
        f"ResourceQuota in {where}.",
        403,
    )


def _not_found(message: str, details: dict[str, Any], call: Call) -> BackendError:
    if details.get("kind") == "namespaces":
        namespace = details.get("name") or call.namespace
        return BackendError(
            f"Namespace {namespace} does not exist on the cluster",
            f"Create it (kubectl create namespace {namespace}) or set the profile's namespace "
            "to one that exists.",
            404,
        )
    if details.get("name"):
        return NotFound(f"{call.what} is not on the cluster", "Deploy the application.", 404)
    kind = call.kind
    return BackendError(
        f"The cluster does not serve {kind.api_version} {kind.kind} ({message})",
        f"Install {kind.provider} on the cluster, or pick a profile whose cluster has it; then "
        "discover the cluster's add-ons again.",
        404,
    )


def _conflict(message: str, call: Call) -> BackendError:
    if "already exists" in message:
        return BackendError(
            f"{call.what} already exists", "Delete it, or apply it instead of creating it.", 409
        )
    managers = sorted(set(_CONFLICT_MANAGER.findall(message)))
    if managers or "conflict" in message.lower():
        owner = ", ".join(managers) or "another writer"
        return BackendError(
            f"{call.what}: another field manager ({owner}) owns fields ServeDeck sets; the "
            f"cluster said: {message}",
            "ServeDeck takes over its fields when it applies, so someone changed the object at "
            f"the same moment: try again. If it repeats, find that writer (kubectl get "
            f"{call.kind.resource} {call.name or ''} --show-managed-fields -o yaml) and stop it "
            "editing the object.".replace("  ", " "),
            409,
        )
    return BackendError(
        f"{call.what} changed while ServeDeck was writing it ({message})", "Try again.", 409
    )


def _invalid(message: str, details: dict[str, Any], call: Call) -> BackendError:
    causes = [
        f"{c.get('field')}: {c.get('message')}" if c.get("field") else str(c.get("message"))
        for c in details.get("causes") or []
        if isinstance(c, dict)
    ]
    said = "; ".join(causes) or message  # the causes without the message's preamble
    return BackendError(
        f"{call.what} is invalid: {said}",
        "Fix the field named and deploy again; the dry run shows the objects ServeDeck renders.",
        422,
    )


def _unreachable(exc: BaseException, api: ApiTarget) -> BackendError:
    inner = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(inner, urllib3.exceptions.ReadTimeoutError):
        return Unreachable(
            f"The Kubernetes API at {api.host} did not answer within {api.read_timeout:g} s",
            "The API server may be overloaded or the network slow: try again; if it persists, "
            "check the API server's health.",
        )
    return Unreachable(
        f"Cannot reach the Kubernetes API at {api.host}: {_network_cause(inner, api)}",
        f"Check the cluster is up and that the {api.source} points at it, then try again.",
    )


def _network_cause(inner: Any, api: ApiTarget) -> str:
    # urllib3 2: NameResolutionError < NewConnectionError < ConnectTimeoutError.
    if isinstance(inner, urllib3.exceptions.NameResolutionError):
        return "its host name does not resolve"
    if isinstance(inner, urllib3.exceptions.NewConnectionError):
        text = str(inner)
        return "connection refused" if "refused" in text.lower() else text.split(": ", 1)[-1]
    if isinstance(inner, urllib3.exceptions.ConnectTimeoutError):
        return f"no connection within {api.connect_timeout:g} s"
    if isinstance(inner, urllib3.exceptions.SSLError):
        return f"TLS failed ({inner})"
    if isinstance(inner, urllib3.exceptions.ProtocolError):
        return "the connection broke off"
    if isinstance(inner, ApiException):  # status 0: the client could not send the request
        return str(inner.reason).splitlines()[-1]
    return str(inner) or type(inner).__name__
