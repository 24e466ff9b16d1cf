"""A small Kubernetes API server for tests: the real `kubernetes` client talks HTTP to it on
127.0.0.1 exactly as it talks to a cluster (DESIGN.md: never a monkeypatched client).

It keeps objects in memory and speaks the subset ServeDeck uses: discovery (/version, /api,
/apis and resource lists) of the add-on groups a test installs; get, list and watch with label
and field selectors and resourceVersions; create (201), replace, merge patch, server-side apply
(field managers kept in metadata.managedFields, conflicts, force) and delete, each honouring
dryRun=All; Leases for leader election (a replace with a stale resourceVersion is 409). Tests
put objects, emit watch events, inject failures (403, 409, 422, quota, slow answers), grant
exact RBAC rules (`rbac`: every request checked by verb, group, resource, namespace and name),
compact the watch history (410 Gone), or take the server down. GET on a Service's
proxy subresource (`.../services/<name>[:<port>]/proxy/<path>`) reaches the URL a test gave
with `serve_service`, as the API server's service proxy reaches the Service's pods, and passes
its answer on piece by piece as it comes (a Service that drips its answer drips through it).

Why not kmock: kmock 0.8 keeps no resourceVersions nor watch history, so neither a watch
resumed from a resourceVersion nor a 410 can be had without patching its internals.

    with KubeEmulator().serve() as kube:       # or the kube_emulator / kube fixtures below
        kube.kubeconfig_path                    # a kubeconfig whose context "emulator" is it
        kube.fail_next(403, verb="patch", resource="InferenceService")
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from tempfile import mkdtemp
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

Path_ = tuple[str, ...]  # a field path inside an object: ("spec", "predictor", "minReplicas")
Owner = tuple[str, str]  # (field manager, operation)


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


KSERVE, KSERVE_ALPHA = "serving.kserve.io/v1beta1", "serving.kserve.io/v1alpha1"
CORE = (
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "services", "Service"),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    # Cluster-scoped, put there by the test as the kubelet registers them (the region the
    # dry run reads from their topology.kubernetes.io/region label).
    Resource("", "v1", "nodes", "Node", False),
)
# What installing ServeDeck itself (deploy/) applies, served by every cluster.
PLATFORM = (
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    Resource("apps", "v1", "deployments", "Deployment"),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
)
# What installing each add-on (jobs.models.ADDONS keys) adds to the API, as its CRDs do.
ADDONS: dict[str, tuple[Resource, ...]] = {
    "kserve": (
        Resource("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"),
        Resource("serving.kserve.io", "v1alpha1", "servingruntimes", "ServingRuntime"),
        Resource(
            "serving.kserve.io",
            "v1alpha1",
            "clusterservingruntimes",
            "ClusterServingRuntime",
            False,
        ),
    ),
    "localModelCache": (
        Resource("serving.kserve.io", "v1alpha1", "localmodelcaches", "LocalModelCache", False),
        Resource(
            "serving.kserve.io", "v1alpha1", "localmodelnodegroups", "LocalModelNodeGroup", False
        ),
    ),
    "keda": (Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject"),),
    "kueue": (
        Resource("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", False),
        Resource("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue"),
        Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload"),
    ),
    "gatewayApi": (
        Resource("gateway.networking.k8s.io", "v1", "gateways", "Gateway"),
        Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute"),
        Resource("gateway.networking.k8s.io", "v1beta1", "referencegrants", "ReferenceGrant"),
    ),
    "certManager": (
        Resource("cert-manager.io", "v1", "certificates", "Certificate"),
        Resource("cert-manager.io", "v1", "clusterissuers", "ClusterIssuer", False),
    ),
    "kubevirt": (
        Resource("kubevirt.io", "v1", "virtualmachines", "VirtualMachine"),
        Resource("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance"),
        Resource("kubevirt.io", "v1", "kubevirts", "KubeVirt"),
    ),
}
ALL_ADDONS = tuple(ADDONS)
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}  # fmt: skip
USER = "system:serviceaccount:servedeck:console"
TOKEN = "emulator-token"
# Identity and server-owned fields: never owned by a field manager.
UNOWNED = {("apiVersion",), ("kind",), ("status",)} | {
    ("metadata", k)
    for k in (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "selfLink",
    )  # fmt: skip
}


class ApiError(Exception):
    """Answered as a Kubernetes Status object."""

    def __init__(self, code: int, message: str, reason: str = "", details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason or REASONS.get(code, "Unknown"),
            "details": details or {},
            "code": code,
        }


@dataclass
class Failure:
    """An answer a test asked for: the next `times` matching requests get it."""

    status: int | None
    message: str
    reason: str
    verb: str | None
    resource: str | None
    name: str | None
    causes: tuple[tuple[str, str], ...]
    times: int
    delay: float

    def matches(self, verb: str, res: Resource, name: str | None) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource in (res.plural, res.kind))
            and (self.name is None or self.name == name)
        )


@dataclass(frozen=True)
class Refusal:
    """A request as RBAC sees it (and one the rules refused)."""

    verb: str
    group: str
    resource: str  # with its subresource: pods/log, services/proxy
    namespace: str | None
    name: str | None


@dataclass(frozen=True)
class Grants:
    """The rules of the Roles bound in each namespace and of the ClusterRoles bound
    cluster-wide (which also grant in every namespace)."""

    roles: dict[str, tuple[dict, ...]]
    cluster: tuple[dict, ...]

    def allow(self, request: Refusal) -> bool:
        rules = [*self.cluster, *(self.roles.get(request.namespace or "", ()))]
        return any(_rule_allows(rule, request) for rule in rules)


def _rule_allows(rule: Mapping[str, Any], request: Refusal) -> bool:
    def has(field: str, value: str) -> bool:
        values = rule.get(field) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    return (
        has("verbs", request.verb)
        and has("apiGroups", request.group)
        and has("resources", request.resource)
        and (not names or request.name in names)
    )


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str


@dataclass(frozen=True)
class _Target:
    res: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    path: str = ""  # a proxy subresource's path below the object


@dataclass(frozen=True)
class _Change:
    rv: int
    res: Resource
    type: str
    object: dict


@dataclass
class _Stream:
    events: Iterator[dict]


@dataclass
class _Text:
    """A plain-text answer (a pod's log, what a service proxy reached)."""

    body: bytes
    status: int = 200


@dataclass
class _Relay:
    """A Service's answer reached through the service proxy, passed on as it comes."""

    answer: Any  # the open urllib response
    status: int


class KubeEmulator:
    """The API server. Thread-safe: the test thread and the server threads share one lock."""

    def __init__(self, directory: Path | None = None, version: str = "v1.31.4") -> None:
        self.directory = Path(directory or mkdtemp(prefix="kube-emulator-"))
        self.version = version
        self._cond = threading.Condition(threading.RLock())
        self._server: ThreadingHTTPServer | None = None
        self._port = 0
        self._generation = 0  # bumped when the server goes down: open watches end
        self.reset()

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.directory / "kubeconfig"

    def start(self) -> KubeEmulator:
        self._listen(0)
        write_kubeconfig(self.kubeconfig_path, self.url)
        return self

    def stop(self) -> None:
        self._halt()

    @contextlib.contextmanager
    def serve(self) -> Iterator[KubeEmulator]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The API server is gone (connections refused, open watches cut) until the block ends;
        then it listens again on the same port with the same objects."""
        self._halt()
        try:
            yield
        finally:
            self._listen(self._port)

    def _listen(self, port: int) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        server.daemon_threads = True
        server.block_on_close = False
        server.emulator = self  # type: ignore[attr-defined]
        self._server, self._port = server, server.server_address[1]
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def _halt(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    # --- what tests call ----------------------------------------------------------------

    def reset(self, addons: Iterable[str] = ALL_ADDONS) -> None:
        """No objects, history, failures or request log; these add-ons installed."""
        with self._cond:
            self._store: dict[tuple[str, str, str], dict] = {}
            self._history: list[_Change] = []
            self._rv = 100
            self._compacted = 0
            self._epoch = 0  # bumped by compact(close_watches=True)
            self._failures: list[Failure] = []
            self._requests: list[Request] = []
            self._rbac_namespaces: frozenset[str] | None = None
            self._grants: Grants | None = None
            self._refusals: list[Refusal] = []
            # (namespace, pod, container) -> (when written in ns, the line with its newline)
            self._pod_logs: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
            self._service_urls: dict[tuple[str, str], str] = {}
            self.replace_deleted_pods = True
            # KubeVirt's stand-in: a deleted instance of a VirtualMachine that runs Always
            # comes back (Pending) under the same name, as virt-controller starts a new one;
            # a VirtualMachine set to Halted loses its instance and virt-launcher pod.
            self.replace_deleted_instances = True
            self._resources: dict[tuple[str, str, str], Resource] = {}
            self.install(*addons)

    def install(self, *addons: str) -> None:
        with self._cond:
            for res in (*CORE, *PLATFORM, *(r for a in addons for r in ADDONS[a])):
                self._resources[(res.group, res.version, res.plural)] = res

    def uninstall(self, *addons: str) -> None:
        """The add-on's CRDs are gone from discovery and the API (its objects are kept)."""
        with self._cond:
            for res in (r for a in addons for r in ADDONS[a]):
                self._resources.pop((res.group, res.version, res.plural), None)

    def set_pod_log(self, namespace: str, pod: str, text: str, container: str = "") -> None:
        """What GET .../pods/<pod>/log answers (for `container`, or the pod's only one); its
        lines are written now, as one write (the same timestamp, as the kubelet gives them)."""
        with self._cond:
            self._pod_logs[(namespace, pod, container)] = []
        self.append_pod_log(namespace, pod, text, container)

    def append_pod_log(self, namespace: str, pod: str, text: str, container: str = "") -> None:
        """More lines at the end of the pod's log, written now."""
        now = time.time_ns()
        with self._cond:
            lines = self._pod_logs.setdefault((namespace, pod, container), [])
            lines.extend((now, line) for line in text.splitlines(keepends=True))

    def serve_service(self, namespace: str, service: str, url: str) -> None:
        """What GET .../services/<service>/proxy/<path> reaches: `url`/<path> (the Service's
        endpoints, for the API server's service proxy). A Service without one answers 503."""
        with self._cond:
            self._service_urls[(namespace, service)] = url.rstrip("/")

    def put(self, obj: dict) -> dict:
        """Create or replace an object as a controller would (metadata filled in); returns it."""
        return self.emit("MODIFIED", obj)

    def emit(self, type: str, obj: dict) -> dict:
        """Make a change watches see: ADDED/MODIFIED store the object, DELETED removes it."""
        res = self._resource_of(obj)
        meta = obj.get("metadata") or {}
        namespace = (meta.get("namespace") or "default") if res.namespaced else None
        key = self._key(res, namespace, meta["name"])
        with self._cond:
            live = self._store.get(key)
            if type == "DELETED":
                if live is None:
                    raise KeyError(f"no {res.kind} {key}")
                return self._remove(res, key)
            new = copy.deepcopy(obj)
            self._fill_metadata(new, res, namespace, live)
            return self._write(res, key, new, "MODIFIED" if live else "ADDED")

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        res = self._resource_named(kind)
        with self._cond:
            found = self._store.get(self._key(res, namespace, name))
            return copy.deepcopy(found)

    def objects(self, kind: str, namespace: str | None = None, selector: str = "") -> list[dict]:
        res = self._resource_named(kind)
        match = _label_matcher(selector)
        with self._cond:
            return [
                copy.deepcopy(o)
                for (plural, ns, _), o in sorted(self._store.items())
                if plural == res.qualified and (namespace is None or ns == namespace) and match(o)
            ]

    def fail_next(
        self,
        status: int | None,
        message: str = "",
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        reason: str = "",
        causes: Iterable[tuple[str, str]] = (),
        times: int = 1,
        delay: float = 0.0,
    ) -> None:
        """Answer the next `times` requests that match (verb: get, list, watch, create,
        update, patch, delete; resource: plural or kind) with this status, after `delay`
        seconds; status None only delays. The message defaults to what a real server says."""
        with self._cond:
            self._failures.append(
                Failure(status, message, reason, verb, resource, name, tuple(causes), times, delay)
            )

    def namespaced_rbac(self, *namespaces: str) -> None:
        """The RBAC the README documents: the console's rights are Roles in these namespaces, so
        any request on a namespaced resource elsewhere, or across all namespaces (a cluster-wide
        list or watch), is refused with 403 as a real server says it. No namespaces: every
        request is allowed again (the default)."""
        with self._cond:
            self._rbac_namespaces = frozenset(namespaces) if namespaces else None

    def rbac(
        self,
        roles: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        cluster: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """Grant exactly these RBAC rules ({apiGroups, resources, verbs, resourceNames?}, as a
        Role or ClusterRole holds them): `roles` maps a namespace to the rules of the Roles
        bound there, `cluster` the rules of ClusterRoles bound cluster-wide. Every request is
        checked as the API server's RBAC authorizer checks it (verb, API group, resource with
        its subresource as pods/log, namespace, name); a server-side apply that creates the
        object needs `create` besides `patch`, as the API server asks both. Anything else is
        403 in the server's words, and kept in `refusals`. None for both: everything allowed."""
        with self._cond:
            if roles is None and not cluster:
                self._grants = None
            else:
                self._grants = Grants(
                    {ns: tuple(map(dict, rules)) for ns, rules in (roles or {}).items()},
                    tuple(map(dict, cluster)),
                )
            self._refusals = []

    @property
    def refusals(self) -> list[Refusal]:
        """The requests the RBAC rules refused since they were set (`rbac`)."""
        with self._cond:
            return list(self._refusals)

    def compact(self, close_watches: bool = True) -> None:
        """Forget the watch history: a watch from an older resourceVersion gets 410 Gone, and
        (close_watches) open watches get a 410 ERROR event and end."""
        with self._cond:
            self._history.clear()
            self._compacted = self._rv
            if close_watches:
                self._epoch += 1
            self._cond.notify_all()

    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._rv)

    @property
    def requests(self) -> list[Request]:
        with self._cond:
            return list(self._requests)

    # --- requests -----------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[int, dict] | _Stream | _Text | _Relay:
        content_type = headers.get("Content-Type", "") or ""
        with self._cond:
            self._requests.append(
                Request(method, path, query, content_type, headers.get("Authorization", ""))
            )
        path = "/" + path.strip("/")
        try:
            if method == "GET" and (doc := self._discovery(path)) is not None:
                return 200, doc
            target = self._target(path)
            verb = _verb(method, target, query)
            self._authorize(verb, target)
            failure = self._take_failure(verb, target)
            if failure is not None:
                time.sleep(failure.delay)
                if failure.status is not None:
                    raise _failure_error(failure, verb, target)
            return self._dispatch(method, verb, target, query, content_type, body)
        except ApiError as error:
            return error.code, error.body

    def _dispatch(
        self, method: str, verb: str, t: _Target, query: dict, content_type: str, body: bytes
    ) -> tuple[int, dict] | _Stream | _Text | _Relay:
        if t.subresource == "log" and t.res.plural == "pods" and verb == "get":
            return self._pod_log(t, query)
        if t.subresource == "proxy" and t.res.plural == "services" and verb == "get":
            return self._service_proxy(t)
        if t.subresource is not None:
            raise ApiError(404, "the server could not find the requested resource")
        dry = query.get("dryRun") == "All"
        if verb == "watch":
            return self._watch(t, query)
        if verb == "list":
            return 200, self._list(t, query)
        if verb == "get":
            return 200, self._get(t)
        if verb == "create":
            return 201, self._create(t, _load(body), query, dry)
        if verb == "update":
            return 200, self._replace(t, _load(body), dry)
        if verb == "delete":
            return 200, self._delete(t, dry)
        if verb == "patch" and "apply-patch" in content_type:
            return self._apply(t, _load(body), query, dry)
        if verb == "patch" and "merge-patch" in content_type:
            return 200, self._merge_patch(t, _load(body), query, dry)
        raise ApiError(415, f"{method} with Content-Type {content_type!r} is not served here")

    def _discovery(self, path: str) -> dict | None:
        with self._cond:
            resources = list(self._resources.values())
        groups: dict[str, list[str]] = {}
        for res in resources:
            if res.group and res.version not in groups.setdefault(res.group, []):
                groups[res.group].append(res.version)
        if path == "/version":
            major, minor = self.version.lstrip("v").split(".")[:2]
            return {
                "major": major,
                "minor": minor,
                "gitVersion": self.version,
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.23",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                for g, vs in sorted(groups.items())]}  # fmt: skip
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"] and len(parts) == 2:
            group_version = ("", "v1")
        elif parts[0] == "apis" and len(parts) == 3:
            group_version = (parts[1], parts[2])
        else:
            return None
        listed = [r for r in resources if (r.group, r.version) == group_version]
        if not listed:
            raise ApiError(404, "the server could not find the requested resource")
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": listed[0].api_version,
            "resources": [
                {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                 "kind": r.kind, "verbs": ["create", "delete", "get", "list", "patch", "update",
                                           "watch"]}
                for r in listed
            ],
        }  # fmt: skip

    def _target(self, path: str) -> _Target:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        path = ""
        if len(rest) > 3 and rest[2] == "proxy":  # services/<name>/proxy/<path...>
            rest, path = rest[:3], "/".join(rest[3:])
        with self._cond:
            res = self._resources.get((group, version, rest[0]))
        named = len(rest) > 1
        if res is None or len(rest) > 3 or (namespace is not None and not res.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        if res.namespaced and named and namespace is None:
            raise ApiError(404, "the server could not find the requested resource")
        return _Target(
            res, namespace, rest[1] if named else None, rest[2] if len(rest) > 2 else None, path
        )

    def _authorize(self, verb: str, t: _Target) -> None:
        with self._cond:
            allowed, grants = self._rbac_namespaces, self._grants
        if grants is not None:
            resource = f"{t.res.plural}/{t.subresource}" if t.subresource else t.res.plural
            request = Refusal(verb, t.res.group, resource, t.namespace, t.name)
            if not grants.allow(request):
                with self._cond:
                    self._refusals.append(request)
                raise _failure_error(Failure(403, "", "", verb, None, None, (), 1, 0.0), verb, t)
        if allowed is None or not t.res.namespaced or t.namespace in allowed:
            return
        refused = Failure(403, "", "", verb, None, None, (), 1, 0.0)
        raise _failure_error(refused, verb, t)

    def _take_failure(self, verb: str, t: _Target) -> Failure | None:
        with self._cond:
            for failure in self._failures:
                if failure.matches(verb, t.res, t.name):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    return failure
        return None

    # --- verbs --------------------------------------------------------------------------

    def _get(self, t: _Target) -> dict:
        with self._cond:
            return copy.deepcopy(self._live(t))

    def _list(self, t: _Target, query: dict) -> dict:
        """A List; with `limit`, one page of it and metadata.continue (the offset of the next
        page here, an opaque token to the client) while more remain, as the API server pages."""
        match = self._matcher(t, query)
        with self._cond:
            items = [copy.deepcopy(o) for o in self._matching(t.res, match)]
            rv = str(self._rv)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0)
        if start or limit:
            end = start + limit if limit else len(items)
            if end < len(items):
                metadata["continue"] = str(end)
                metadata["remainingItemCount"] = len(items) - end
            items = items[start:end]
        return {"apiVersion": t.res.api_version, "kind": f"{t.res.kind}List",
                "metadata": metadata, "items": items}  # fmt: skip

    def _create(self, t: _Target, body: dict, query: dict, dry: bool) -> dict:
        self._check_body(t, body, named=False)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        key = self._key(t.res, t.namespace, meta.get("name") or "")
        with self._cond:
            if key in self._store:
                raise ApiError(409, f'{t.res.qualified} "{meta["name"]}" already exists',
                               "AlreadyExists", _details(t.res, meta["name"]))  # fmt: skip
            self._fill_metadata(body, t.res, t.namespace, None)
            owner = (query.get("fieldManager") or "unknown", "Update")
            _set_owners(body, {owner: _config_paths(body)}, t.res.api_version)
            return body if dry else self._write(t.res, key, body, "ADDED")

    def _replace(self, t: _Target, body: dict, dry: bool) -> dict:
        self._check_body(t, body)
        with self._cond:
            live = self._live(t)
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != live["metadata"]["resourceVersion"]:
                raise ApiError(409, f'Operation cannot be fulfilled on {t.res.qualified} '
                               f'"{t.name}": the object has been modified; please apply your '
                               "changes to the latest version and try again")  # fmt: skip
            self._fill_metadata(body, t.res, t.namespace, live)
            return body if dry else self._write(t.res, self._key_of(t), body, "MODIFIED")

    def _merge_patch(self, t: _Target, patch: dict, query: dict, dry: bool) -> dict:
        with self._cond:
            live = self._live(t)
            obj = _json_merge(copy.deepcopy(live), patch)
            owners = _owners(live)
            set_paths = _config_paths(_without_nulls(patch))
            removed = _null_paths(patch)
            for owner in owners:
                owners[owner] = {
                    p for p in owners[owner] - set_paths if not any(_under(p, r) for r in removed)
                }
            me = (query.get("fieldManager") or "unknown", "Update")
            owners[me] = owners.get(me, set()) | set_paths
            _set_owners(obj, owners, t.res.api_version)
            self._fill_metadata(obj, t.res, t.namespace, live)
            return obj if dry else self._write(t.res, self._key_of(t), obj, "MODIFIED")

    def _apply(self, t: _Target, body: dict, query: dict, dry: bool) -> tuple[int, dict]:
        """Server-side apply: the field manager owns exactly what it sent; fields it sent
        before and no longer sends are removed unless another manager owns them; a field
        another manager owns with a different value is a conflict unless force=true."""
        manager = query.get("fieldManager")
        if not manager:
            raise ApiError(422, 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                           "Required value: is required for apply patch")  # fmt: skip
        self._check_body(t, body)
        config = {k: v for k, v in body.items() if k != "status"}
        applied = _config_paths(config)
        me = (manager, "Apply")
        with self._cond:
            live = self._store.get(self._key_of(t))
            if live is None:
                # Apply creates the object: the API server asks RBAC for create too.
                self._authorize("create", t)
                obj, owners = copy.deepcopy(config), {me: applied}
            else:
                owners = _owners(live)
                self._take_over(t, live, config, owners, me, query.get("force") == "true")
                obj = copy.deepcopy(live)
                others = set().union(*(p for o, p in owners.items() if o != me))
                for path in owners.get(me, set()) - applied:
                    if not any(_under(p, path) or _under(path, p) for p in others):
                        _delete_path(obj, path)
                _deep_merge(obj, config)
                owners[me] = applied
            _set_owners(obj, owners, t.res.api_version)
            self._fill_metadata(obj, t.res, t.namespace, live)
            if dry or (live is not None and _same(obj, live)):
                return (201 if live is None else 200), obj  # a no-op apply writes nothing
            written = self._write(t.res, self._key_of(t), obj, "MODIFIED" if live else "ADDED")
            return (201 if live is None else 200), written

    def _take_over(
        self, t: _Target, live: dict, config: dict, owners: dict, me: Owner, force: bool
    ) -> None:
        conflicts: list[tuple[str, str]] = []
        for owner, paths in owners.items():
            if owner == me:
                continue
            clash = {p for p in paths & _config_paths(config) if _at(live, p) != _at(config, p)}
            if force:
                owners[owner] = paths - clash  # force moves ownership; equal values are shared
            conflicts += [(owner[0], "." + ".".join(p)) for p in sorted(clash)]
        if conflicts and not force:
            said = [f'conflict with "{m}" using {t.res.api_version}: {f}' for m, f in conflicts]
            raise ApiError(
                409,
                f"Apply failed with {len(said)} conflict{'s' if len(said) > 1 else ''}: "
                + "; ".join(said),
                details={
                    **_details(t.res, t.name),
                    "causes": [{"reason": "FieldManagerConflict", "message": m, "field": f}
                               for m, f in conflicts],
                },
            )  # fmt: skip

    def _delete(self, t: _Target, dry: bool) -> dict:
        with self._cond:
            live = copy.deepcopy(self._live(t))
            if dry:
                return live
            gone = self._remove(t.res, self._key_of(t))
            if t.res.kind == "Pod" and self.replace_deleted_pods:
                self._replace_pod(gone)
            if t.res.kind == "VirtualMachineInstance" and self.replace_deleted_instances:
                self._replace_instance(gone)
            return gone

    def _replace_instance(self, instance: dict) -> None:
        meta = instance["metadata"]
        machine = self._store.get(
            self._key(self._resource_named("VirtualMachine"), meta["namespace"], meta["name"])
        )
        if machine is None or (machine.get("spec") or {}).get("runStrategy") != "Always":
            return
        template = (machine.get("spec") or {}).get("template") or {}
        fresh = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": copy.deepcopy((template.get("metadata") or {}).get("labels") or {}),
                "annotations": copy.deepcopy(
                    (template.get("metadata") or {}).get("annotations") or {}
                ),
                "ownerReferences": copy.deepcopy(meta.get("ownerReferences") or []),
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        self.emit("ADDED", fresh)

    def _replace_pod(self, pod: dict) -> None:
        """A ReplicaSet's stand-in: a deleted pod it owns comes back under a new name."""
        meta = pod["metadata"]
        if not any(o.get("kind") == "ReplicaSet" for o in meta.get("ownerReferences") or []):
            return
        prefix = meta.get("generateName") or meta["name"].rsplit("-", 1)[0] + "-"
        fresh = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": prefix + secrets.token_hex(3)[:5],
                "generateName": prefix,
                "namespace": meta["namespace"],
                "labels": copy.deepcopy(meta.get("labels") or {}),
                "ownerReferences": copy.deepcopy(meta["ownerReferences"]),
            },
            "spec": copy.deepcopy(pod.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        self.emit("ADDED", fresh)

    def _pod_log(self, t: _Target, query: dict) -> _Text:
        """The pod's log as the kubelet serves it: tailLines first, then limitBytes."""
        pod = self._get(t)
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container", "")
        if not container and len(containers) > 1:
            raise ApiError(
                400,
                f"a container name must be specified for pod {t.name}, choose one of: {containers}",
            )
        if container and containers and container not in containers:
            raise ApiError(400, f"container {container} is not valid for pod {t.name}")
        with self._cond:
            written = self._pod_logs.get((t.namespace, t.name, container))
            if written is None:
                written = self._pod_logs.get((t.namespace, t.name, ""), [])
            written = list(written)
        if query.get("timestamps") == "true":  # RFC3339Nano, trailing zeros trimmed as Go does
            lines = [f"{_rfc3339_nano(ns)} {line}" for ns, line in written]
        else:
            lines = [line for _, line in written]
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[-tail:] if tail > 0 else []
        data = "".join(lines).encode()
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        return _Text(data)

    def _service_proxy(self, t: _Target) -> _Text | _Relay:
        """GET through the service proxy: <name>, <name>:<port> or <scheme>:<name>:<port>."""
        parts = unquote(t.name or "").split(":")
        name = parts[1] if len(parts) == 3 else parts[0]
        with self._cond:
            url = self._service_urls.get((t.namespace or "", name))
        if url is None:
            raise ApiError(
                503, f'no endpoints available for service "{name}"', "ServiceUnavailable"
            )
        try:
            answer = urllib.request.urlopen(f"{url}/{t.path}", timeout=5)  # noqa: S310
            return _Relay(answer, answer.status)
        except urllib.error.HTTPError as error:
            return _Text(error.read(), error.code)
        except OSError as error:
            raise ApiError(
                503, f"error trying to reach service: {error}", "ServiceUnavailable"
            ) from None

    def _watch(self, t: _Target, query: dict) -> _Stream:
        match = self._matcher(t, query)
        timeout = min(float(query.get("timeoutSeconds") or 300), 1800)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        since = query.get("resourceVersion") or "0"
        if not since.isdigit():
            raise ApiError(400, f"invalid resourceVersion {since!r}")
        with self._cond:
            if since != "0" and int(since) < self._compacted:
                return _Stream(_once(_gone(since, self._compacted)))
            initial = [] if since != "0" else [
                {"type": "ADDED", "object": copy.deepcopy(o)} for o in self._matching(t.res, match)
            ]  # fmt: skip
            start = int(since) if since != "0" else self._rv
            marks = (self._epoch, self._generation)
        deadline = time.monotonic() + timeout
        return _Stream(self._events(t.res, match, initial, start, marks, deadline, bookmarks))

    def _events(
        self,
        res: Resource,
        match: Callable[[dict], bool],
        initial: list[dict],
        position: int,
        marks: tuple[int, int],
        deadline: float,
        bookmarks: bool,
    ) -> Iterator[dict]:
        yield from initial
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda position=position: (
                        self._rv > position
                        or (self._epoch, self._generation) != marks
                        or time.monotonic() >= deadline
                    ),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
                changes = [c for c in self._history if c.rv > position and c.res == res]
                position, epoch, generation = self._rv, self._epoch, self._generation
            for change in changes:
                if match(change.object):
                    yield {"type": change.type, "object": copy.deepcopy(change.object)}
            if generation != marks[1]:
                return  # the server went down: the connection just ends
            if epoch != marks[0]:
                yield _gone(str(position), position)
                return
            if time.monotonic() >= deadline:
                if bookmarks:
                    yield {"type": "BOOKMARK", "object": {"kind": res.kind,
                           "apiVersion": res.api_version,
                           "metadata": {"resourceVersion": str(position)}}}  # fmt: skip
                return

    # --- storage ------------------------------------------------------------------------

    def _key(self, res: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (res.qualified, (namespace or "") if res.namespaced else "", name)

    def _key_of(self, t: _Target) -> tuple[str, str, str]:
        return self._key(t.res, t.namespace, t.name or "")

    def _live(self, t: _Target) -> dict:
        found = self._store.get(self._key_of(t))
        if found is None:
            raise ApiError(404, f'{t.res.qualified} "{t.name}" not found', "NotFound",
                           _details(t.res, t.name))  # fmt: skip
        return found

    def _matching(self, res: Resource, match: Callable[[dict], bool]) -> list[dict]:
        return [
            o for (q, _, _), o in sorted(self._store.items()) if q == res.qualified and match(o)
        ]

    def _matcher(self, t: _Target, query: dict) -> Callable[[dict], bool]:
        labels = _label_matcher(query.get("labelSelector", ""))
        fields = _field_matcher(query.get("fieldSelector", ""))
        namespace = t.namespace

        def match(obj: dict) -> bool:
            in_ns = namespace is None or obj["metadata"].get("namespace") == namespace
            return in_ns and labels(obj) and fields(obj)

        return match

    def _write(self, res: Resource, key: tuple[str, str, str], obj: dict, type: str) -> dict:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._store[key] = copy.deepcopy(obj)
        self._history.append(_Change(self._rv, res, type, copy.deepcopy(obj)))
        self._cond.notify_all()
        if res.kind == "VirtualMachine":
            self._stop_if_halted(obj)
        return copy.deepcopy(obj)

    def _stop_if_halted(self, machine: dict) -> None:
        """KubeVirt's stand-in: a VirtualMachine that runs Halted has no instance. Its instance
        is stopped and deleted, and its virt-launcher pod (which held the GPUs) goes with it."""
        if (machine.get("spec") or {}).get("runStrategy") != "Halted":
            return
        meta = machine["metadata"]
        instances = self._resource_named("VirtualMachineInstance")
        key = self._key(instances, meta.get("namespace"), meta["name"])
        if key in self._store:
            self._remove(instances, key)
        pods = self._resource_named("Pod")
        for key, obj in list(self._store.items()):
            labels = obj["metadata"].get("labels") or {}
            if (
                key[0] == pods.qualified
                and key[1] == meta.get("namespace")
                and labels.get("vm.kubevirt.io/name") == meta["name"]
            ):
                self._remove(pods, key)

    def _remove(self, res: Resource, key: tuple[str, str, str]) -> dict:
        gone = self._store.pop(key)
        self._rv += 1
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._history.append(_Change(self._rv, res, "DELETED", copy.deepcopy(gone)))
        self._cond.notify_all()
        return gone

    def _fill_metadata(self, obj: dict, res: Resource, ns: str | None, live: dict | None) -> None:
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta["namespace"] = ns or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        old = (live or {}).get("metadata") or {}
        meta["uid"] = old.get("uid") or meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = (
            old.get("creationTimestamp")
            or meta.get("creationTimestamp")
            or datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        generation = old.get("generation") or meta.get("generation") or 1
        spec_changed = live is not None and _body(live) != _body(obj)
        meta["generation"] = generation + 1 if spec_changed else generation
        meta["resourceVersion"] = old.get("resourceVersion") or str(self._rv)

    def _check_body(self, t: _Target, body: dict, named: bool = True) -> None:
        if body.get("apiVersion") not in (None, t.res.api_version) or body.get("kind") not in (
            None,
            t.res.kind,
        ):
            raise ApiError(400, f"the body is {body.get('apiVersion')} {body.get('kind')}, the "
                           f"URL {t.res.api_version} {t.res.kind}")  # fmt: skip
        meta = body.get("metadata") or {}
        if named and meta.get("name") != t.name:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        if t.namespace and meta.get("namespace") not in (None, t.namespace):
            raise ApiError(400, "the namespace of the provided object does not match the "
                           "namespace sent on the request")  # fmt: skip

    def _resource_of(self, obj: dict) -> Resource:
        for res in (*CORE, *PLATFORM, *(r for rs in ADDONS.values() for r in rs)):
            if (res.api_version, res.kind) == (obj.get("apiVersion"), obj.get("kind")):
                return res
        raise ValueError(f"the emulator does not know {obj.get('apiVersion')} {obj.get('kind')}")

    def _resource_named(self, kind: str) -> Resource:
        for res in (*CORE, *PLATFORM, *(r for rs in ADDONS.values() for r in rs)):
            if kind in (res.kind, res.plural):
                return res
        raise ValueError(f"the emulator does not know {kind}")


class _Handler(BaseHTTPRequestHandler):
    """One request per connection; a watch is a chunked stream, one event per chunk, as the
    API server sends it (urllib3 hands each chunk over as it arrives)."""

    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        emulator: KubeEmulator = self.server.emulator  # type: ignore[attr-defined]
        reply = emulator.handle(method, split.path, query, self.headers, body)
        if isinstance(reply, _Stream):
            self._stream(reply.events)
        elif isinstance(reply, _Relay):
            self._relay(reply)
        elif isinstance(reply, _Text):
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(reply.body)
        else:
            self._send(*reply)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _relay(self, relay: _Relay) -> None:
        self.send_response(relay.status)
        self.send_header("Content-Type", relay.answer.headers.get("Content-Type", "text/plain"))
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            with relay.answer:
                while piece := relay.answer.read1(64 * 1024):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # either side went away

    def _stream(self, events: Iterator[dict]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for event in events:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away
        finally:
            events.close()  # type: ignore[attr-defined]


# --- helpers -------------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str, context: str = "emulator") -> Path:
    """A kubeconfig with two contexts: `context` (the emulator) and "unreachable" (a closed
    port); `current-context` is `context`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emulator", "cluster": {"server": server}},
            {"name": "unreachable", "cluster": {"server": f"http://127.0.0.1:{closed_port()}"}},
        ],
        "users": [{"name": "servedeck", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": context, "context": {"cluster": "emulator", "user": "servedeck"}},
            {"name": "unreachable", "context": {"cluster": "unreachable", "user": "servedeck"}},
        ],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _verb(method: str, t: _Target, query: dict) -> str:
    if method == "GET":
        if t.name is not None:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _failure_error(f: Failure, verb: str, t: _Target) -> ApiError:
    res, name = t.res, t.name or ""
    message = f.message
    if not message and f.status == 403:
        scope = f'in the namespace "{t.namespace}"' if t.namespace else "at the cluster scope"
        # A subresource's rule is its own, as RBAC names it: pods/log, services/proxy.
        resource = f"{res.plural}/{t.subresource}" if t.subresource else res.plural
        message = (
            f'{res.qualified} "{name}" is forbidden: User "{USER}" cannot {verb} resource '
            f'"{resource}" in API group "{res.group}" {scope}'
        )
    elif not message and f.status == 409:
        message = (
            f'Apply failed with 1 conflict: conflict with "kubectl-edit" using '
            f"{res.api_version}: .spec"
        )
    elif not message and f.status == 422:
        said = "; ".join(f"{field}: {text}" for field, text in f.causes) or "invalid"
        message = f'{res.kind}.{res.group} "{name}" is invalid: {said}'
    details = _details(res, name)
    if f.causes:
        details["causes"] = [
            {"reason": "FieldValueInvalid", "message": text, "field": field}
            for field, text in f.causes
        ]
    return ApiError(f.status or 500, message or "injected failure", f.reason, details)


def _once(event: dict) -> Iterator[dict]:
    yield event


def _gone(since: str, oldest: int) -> dict:
    message = f"too old resource version: {since} ({oldest})"
    return {"type": "ERROR", "object": ApiError(410, message, "Expired").body}


def _details(res: Resource, name: str | None) -> dict:
    return {"name": name or "", "group": res.group, "kind": res.plural}


def _load(body: bytes) -> dict:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        try:
            data = yaml.safe_load(body)  # apply-patch+yaml may be YAML proper
        except yaml.YAMLError as error:
            raise ApiError(400, f"the body is neither JSON nor YAML: {error}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body is not an object")
    return data


def _body(obj: dict) -> dict:
    """What a change to bumps generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _same(a: dict, b: dict) -> bool:
    """Equal but for the managedFields' timestamps."""

    def bare(obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        for entry in obj["metadata"].get("managedFields") or []:
            entry.pop("time", None)
        return obj

    return bare(a) == bare(b)


def _leaf_paths(value: Any, prefix: Path_ = ()) -> set[Path_]:
    if isinstance(value, dict) and value:
        return set().union(*(_leaf_paths(v, (*prefix, str(k))) for k, v in value.items()))
    return {prefix}  # lists are atomic, as `x-kubernetes-list-type: atomic`


def _config_paths(config: dict) -> set[Path_]:
    return {p for p in _leaf_paths(config) if not any(_under(p, u) for u in UNOWNED)}


def _under(path: Path_, prefix: Path_) -> bool:
    return path[: len(prefix)] == prefix


def _at(obj: Any, path: Path_) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _delete_path(obj: dict, path: Path_) -> None:
    parents = [obj]
    for key in path[:-1]:
        nxt = parents[-1].get(key)
        if not isinstance(nxt, dict):
            return
        parents.append(nxt)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop maps the removal left empty
        if parents[depth] or path[:depth] == ("metadata",):
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _deep_merge(target: dict, source: dict) -> None:
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _json_merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    target = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _json_merge(target.get(key), value)
    return target


def _without_nulls(patch: dict) -> dict:
    return {
        k: _without_nulls(v) if isinstance(v, dict) else v
        for k, v in patch.items()
        if v is not None
    }


def _null_paths(patch: dict, prefix: Path_ = ()) -> set[Path_]:
    found: set[Path_] = set()
    for key, value in patch.items():
        if value is None:
            found.add((*prefix, key))
        elif isinstance(value, dict):
            found |= _null_paths(value, (*prefix, key))
    return found


def _owners(obj: dict) -> dict[Owner, set[Path_]]:
    owners: dict[Owner, set[Path_]] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        owner = (entry.get("manager", ""), entry.get("operation", "Update"))
        owners[owner] = owners.get(owner, set()) | _paths_of(entry.get("fieldsV1") or {})
    return owners


def _paths_of(fields: dict, prefix: Path_ = ()) -> set[Path_]:
    keys = {k: v for k, v in fields.items() if k.startswith("f:")}
    if not keys:
        return {prefix} if prefix else set()
    return set().union(*(_paths_of(v, (*prefix, k[2:])) for k, v in keys.items()))


def _fields_v1(paths: set[Path_]) -> dict:
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _set_owners(obj: dict, owners: dict[Owner, set[Path_]], api_version: str) -> None:
    now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj.setdefault("metadata", {})["managedFields"] = [
        {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
         "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
        for (manager, operation), paths in sorted(owners.items()) if paths
    ]  # fmt: skip


_SET_TERM = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_HAS_TERM = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def _label_matcher(selector: str) -> Callable[[dict], bool]:
    terms = [t for t in re.split(r",(?![^()]*\))", selector or "") if t.strip()]
    checks = [_label_term(t) for t in terms]
    return lambda obj: all(
        check((obj.get("metadata") or {}).get("labels") or {}) for check in checks
    )


def _label_term(term: str) -> Callable[[dict], bool]:
    if m := _SET_TERM.match(term):
        key, op, values = m[1], m[2], {v.strip() for v in m[3].split(",")}
        return lambda labels: (labels.get(key) in values) == (op == "in")
    if m := _EQ_TERM.match(term):
        key, op, value = m[1], m[2], m[3]
        return lambda labels: (labels.get(key) == value) == (op != "!=")
    if m := _HAS_TERM.match(term):
        missing, key = m[1] == "!", m[2]
        return lambda labels: (key in labels) != missing
    raise ApiError(400, f"unable to parse requirement: {term!r}")


def _field_matcher(selector: str) -> Callable[[dict], bool]:
    checks = []
    for term in filter(str.strip, (selector or "").split(",")):
        m = _EQ_TERM.match(term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}")
        path, op, value = tuple(m[1].split(".")), m[2], m[3]
        checks.append((path, op != "!=", value))
    return lambda obj: all((str(_at(obj, p) or "") == v) == eq for p, eq, v in checks)


# --- fixtures ------------------------------------------------------------------------------


# Registered for every test by tests/conftest.py (pytest_plugins). Named through name=, so a
# module that imports this one has no name that clashes with its tests' `kube` parameters.


@pytest.fixture(scope="session", name="kube_emulator")
def kube_emulator_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEmulator]:
    """One emulator for the session, listening on 127.0.0.1; its kubeconfig in a temp dir."""
    with KubeEmulator(tmp_path_factory.mktemp("kube")).serve() as emulator:
        yield emulator


@pytest.fixture(name="kube")
def kube_fixture(kube_emulator: KubeEmulator, settings: Any) -> KubeEmulator:
    """The session's emulator, emptied: no objects, failures, history or request log; every
    add-on installed. Its kubeconfig's folder is the console's SERVEDECK_KUBECONFIG_DIR."""
    kube_emulator.reset()
    settings.SERVEDECK_KUBECONFIG_DIR = kube_emulator.directory
    return kube_emulator


__all__ = [
    "ADDONS",
    "ALL_ADDONS",
    "KSERVE",
    "KSERVE_ALPHA",
    "TOKEN",
    "USER",
    "ApiError",
    "Grants",
    "KubeEmulator",
    "Refusal",
    "Request",
    "Resource",
    "closed_port",
    "kube_emulator_fixture",
    "kube_fixture",
    "write_kubeconfig",
]


def _rfc3339_nano(ns: int) -> str:
    """Go's time.RFC3339Nano in UTC: 2026-12-01T21:17:34.12345Z (no trailing zeros)."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"
