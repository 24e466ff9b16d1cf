"""The one place that calls the `kubernetes` client: a connection (kubeconfig file + context, or
the in-cluster service account) with short timeouts on every call, and get / list / apply /
patch / delete / watch for any Kind, answering plain JSON dicts as the API server sent them.

Every call passes _preload_content=False and parses the body itself: the status derivation
reads the server's own camelCase JSON, and no generated model is built (nor can one reject a
field a newer server adds).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from .errors import NETWORK_ERRORS, ApiTarget, BackendError, Call, from_status, translated
from .kinds import POD, SERVICE_PROXY, Kind
from .kubeconfig import KubeconfigRefused, resolve_kubeconfig

FIELD_MANAGER = "servedeck"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class ClusterConnection:
    """How to reach one cluster: what a jobs.models.Cluster row says."""

    name: str
    kubeconfig_path: str = ""
    context: str = ""
    in_cluster: bool = False
    # The only folder kubeconfig_path may name a file in (SERVEDECK_KUBECONFIG_DIR).
    kubeconfig_dir: str = ""

    @classmethod
    def from_cluster(cls, cluster: Any) -> ClusterConnection:
        from django.conf import settings

        return cls(
            name=cluster.name,
            kubeconfig_path=cluster.kubeconfig_path or "",
            context=cluster.context or "",
            in_cluster=bool(cluster.in_cluster),
            kubeconfig_dir=str(settings.SERVEDECK_KUBECONFIG_DIR),
        )

    @property
    def source(self) -> str:
        if self.in_cluster:
            return "in-cluster service account"
        context = f" (context {self.context})" if self.context else ""
        return f"kubeconfig {self.kubeconfig_path or '~/.kube/config'}{context}"


class KubeApi:
    """A lazily made ApiClient and the calls the backend makes through it."""

    def __init__(self, connection: ClusterConnection, connect_timeout: float, read_timeout: float):
        self.connection = connection
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)

    @cached_property
    def client(self) -> client.ApiClient:
        configuration = client.Configuration()
        # No retries: a cluster that is down is reported within connect_timeout, not after
        # urllib3's default three attempts; the reconciler has its own retry loop.
        configuration.retries = urllib3.Retry(total=0, redirect=0)
        where = self.connection.source
        try:
            if self.connection.in_cluster:
                config.load_incluster_config(client_configuration=configuration)
                return client.ApiClient(configuration)
            return config.new_client_from_config(
                config_file=self._kubeconfig_file(),
                context=self.connection.context or None,
                persist_config=False,  # never write a refreshed token back into their file
                client_configuration=configuration,
            )
        except KubeconfigRefused as refused:
            raise BackendError(
                f"Cannot use cluster {self.connection.name}'s {where}: {refused}",
                "Edit the cluster to name a kubeconfig file in the folder, or use the in-cluster "
                "service account when the console runs in the cluster.",
            ) from None
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
            raise BackendError(
                f"Cannot use cluster {self.connection.name}'s {where}: {exc}",
                "Fix the kubeconfig path and context of the cluster (or use the in-cluster "
                "service account when the console runs in the cluster).",
            ) from exc

    def _kubeconfig_file(self) -> str:
        """The one file the client may read: never a list of files, `~`, a default such as
        $KUBECONFIG, or a file outside the folder, whatever the cluster row holds."""
        folder = self.connection.kubeconfig_dir
        if not folder:
            raise KubeconfigRefused("The connection names no kubeconfig folder.")
        return resolve_kubeconfig(self.connection.kubeconfig_path, folder)

    @property
    def target(self) -> ApiTarget:
        host = self.client.configuration.host
        return ApiTarget(host, self.connection.source, self.connect_timeout, self.read_timeout)

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()
            del self.__dict__["client"]

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.client)

    @cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.client)

    # --- calls --------------------------------------------------------------------------

    def request(self, call: Call, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """method(*args, **kwargs) with the timeouts (or a shorter `_request_timeout` the
        caller gives); the answer's JSON."""
        timeout = kwargs.pop("_request_timeout", None) or self.timeout
        with translated(call, self.target):
            response = method(*args, **kwargs, _preload_content=False, _request_timeout=timeout)
            return _json(response.data)

    def pod_log(
        self,
        name: str,
        namespace: str,
        container: str | None,
        tail_lines: int,
        limit_bytes: int,
        timestamps: bool = False,
    ) -> bytes:
        """GET .../pods/<name>/log: the last tail_lines lines, at most limit_bytes of them
        (each after its RFC3339Nano time with `timestamps`)."""
        call = Call("get", POD, namespace, name)
        options: dict[str, Any] = {"tail_lines": int(tail_lines), "limit_bytes": int(limit_bytes)}
        if timestamps:
            options["timestamps"] = True
        if container:
            options["container"] = container
        with translated(call, self.target):
            response = self.core.read_namespaced_pod_log(
                name, namespace, **options, _preload_content=False, _request_timeout=self.timeout
            )
            # limitBytes bounds what the kubelet sends; read no more than that however much
            # a server sends.
            return response.read(int(limit_bytes) + 1)[: int(limit_bytes)]

    def service_proxy_get(
        self,
        service: str,
        namespace: str,
        path: str,
        limit_bytes: int,
        timeout: float,
        deadline: float,
    ) -> bytes:
        """GET .../services/<service>/proxy/<path>: what the Service answers, through the API
        server. Each wait (to connect, for the next piece) at most `timeout` seconds, and no
        piece read once `deadline` seconds have passed: a Service that drips its answer is
        cut off (BackendError), so the whole call takes at most about deadline + timeout.
        ValueError past limit_bytes."""
        call = Call("get", SERVICE_PROXY, namespace, service)
        until = time.monotonic() + deadline
        with translated(call, self.target):
            response = self.core.connect_get_namespaced_service_proxy_with_path(
                service,
                namespace,
                path,
                _preload_content=False,
                _request_timeout=(min(self.connect_timeout, timeout), timeout),
            )
            whole = False
            try:
                body = bytearray()
                # read1: what has come, in one wait (read(n) would wait for all n bytes,
                # each byte within its own timeout).
                while piece := response.read1(64 * 1024):
                    body += piece
                    if len(body) > limit_bytes:
                        raise ValueError(f"{service}/{path} answered more than {limit_bytes} bytes")
                    if time.monotonic() > until:
                        raise BackendError(
                            f"{service}/{path} did not send its whole answer within {deadline:g} s "
                            f"through the Kubernetes API at {self.target.host}",
                            "The Service's server may be overloaded: it is asked again later.",
                        )
                whole = True
            finally:
                if not whole:  # a connection in the middle of an answer is no use to the pool
                    response.close()
                response.release_conn()
        return bytes(body)

    def version(self) -> dict[str, Any]:
        """GET /version: {"gitVersion": "v1.31.4", …}."""
        call = Call("get", _discovery("", ""))
        return self.request(call, client.VersionApi(self.client).get_code)

    def api_groups(self) -> dict[str, Any]:
        """GET /apis: the API groups served, each with its preferred version."""
        call = Call("get", _discovery("", ""))
        return self.request(call, client.ApisApi(self.client).get_api_versions)

    def resources(self, group: str, version: str) -> dict[str, Any]:
        """GET /apis/<group>/<version>: the resources it serves (404 when it does not)."""
        call = Call("get", _discovery(group, version))
        return self.request(call, self.custom.get_api_resources, group, version)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        call = Call("get", kind, namespace, name)
        if not kind.group:  # core: CoreV1Api's read_namespaced_service
            method = getattr(self.core, f"read_namespaced_{kind.singular}")
            return self.request(call, method, name, namespace)
        if kind.namespaced:
            method = self.custom.get_namespaced_custom_object
            return self.request(call, method, *_where(kind, namespace), name)
        return self.request(call, self.custom.get_cluster_custom_object, *_where(kind), name)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """A List (items + metadata.resourceVersion); namespace None lists all namespaces."""
        method, args = self._list_method(kind, namespace)
        call = Call("watch" if options.get("watch") else "list", kind, namespace)
        if label_selector:
            options["label_selector"] = label_selector
        return self.request(call, method, *args, **options)

    def apply(self, kind: Kind, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply as FIELD_MANAGER, forced: ServeDeck owns the fields it renders."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") if kind.namespaced else None
        call = Call("patch", kind, namespace, meta["name"])
        # Strict: a field the cluster's CRD does not know is refused by name, not silently
        # pruned (an older KServe would otherwise run the model without the setting).
        options = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "field_validation": "Strict",
            "_content_type": APPLY_PATCH,
        }
        if dry_run:
            options["dry_run"] = "All"
        if not kind.group:  # core: CoreV1Api's patch_namespaced_service
            method = getattr(self.core, f"patch_namespaced_{kind.singular}")
            return self.request(call, method, meta["name"], namespace, obj, **options)
        if kind.namespaced:
            method = self.custom.patch_namespaced_custom_object
            return self.request(
                call, method, *_where(kind, namespace), meta["name"], obj, **options
            )
        method = self.custom.patch_cluster_custom_object
        return self.request(call, method, *_where(kind), meta["name"], obj, **options)

    def merge_patch(
        self, kind: Kind, name: str, namespace: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        call = Call("patch", kind, namespace, name)
        method = self.custom.patch_namespaced_custom_object
        options = {"field_manager": FIELD_MANAGER, "_content_type": MERGE_PATCH}
        return self.request(call, method, *_where(kind, namespace), name, patch, **options)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        call = Call("delete", kind, namespace, name)
        if not kind.group:  # core: CoreV1Api's delete_namespaced_pod
            method = getattr(self.core, f"delete_namespaced_{kind.singular}")
            self.request(call, method, name, namespace)
        elif kind.namespaced:
            method = self.custom.delete_namespaced_custom_object
            self.request(call, method, *_where(kind, namespace), name)
        else:
            self.request(call, self.custom.delete_cluster_custom_object, *_where(kind), name)

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str | None,
        timeout_seconds: int,
    ) -> Iterator[dict[str, Any]]:
        """The raw watch events ({"type", "object"}) until the server ends the watch after
        timeout_seconds. An ERROR event raises its BackendError (Gone for 410)."""
        method, args = self._list_method(kind, namespace)
        call = Call("watch", kind, namespace)
        options: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": int(timeout_seconds),
        }
        if label_selector:
            options["label_selector"] = label_selector
        if resource_version:
            options["resource_version"] = str(resource_version)
        # The server closes the stream after timeout_seconds; read_timeout is the slack.
        timeout = (self.connect_timeout, int(timeout_seconds) + self.read_timeout)
        target = self.target
        with translated(call, target):
            response = method(*args, **options, _preload_content=False, _request_timeout=timeout)
        try:
            with translated(call, target):
                for line in _lines(response):
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise from_status(status, int(status.get("code") or 500), call, target)
                    yield event
        finally:
            # Close first: a watch left half-read must not go back into the pool.
            response.close()
            response.release_conn()

    def _list_method(self, kind: Kind, namespace: str | None) -> tuple[Any, tuple]:
        if not kind.group:  # core: CoreV1Api's list_namespaced_pod, list_pod_for_all_namespaces
            if not kind.namespaced:  # list_node
                return getattr(self.core, f"list_{kind.singular}"), ()
            if namespace:
                return getattr(self.core, f"list_namespaced_{kind.singular}"), (namespace,)
            return getattr(self.core, f"list_{kind.singular}_for_all_namespaces"), ()
        if kind.namespaced and namespace:
            return self.custom.list_namespaced_custom_object, _where(kind, namespace)
        return self.custom.list_cluster_custom_object, _where(kind)


def _discovery(group: str, version: str) -> Kind:
    """A discovery document, as errors name it."""
    name = f"{group}/{version} API" if group else "API discovery"
    return Kind(name, group, version, "", False, group or "Kubernetes")


def _where(kind: Kind, namespace: str | None = None) -> tuple[str, ...]:
    if kind.namespaced and namespace is not None:
        return (kind.group, kind.version, namespace, kind.plural)
    return (kind.group, kind.version, kind.plural)


def _json(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data or b"{}")
    except ValueError as exc:
        raise BackendError(
            "The Kubernetes API answered something that is not JSON",
            "Check that the kubeconfig's server address is the API server, not a web page.",
        ) from exc
    return parsed if isinstance(parsed, dict) else {}


def _lines(response: Any) -> Iterator[str]:
    """The newline-separated JSON events of a watch response, as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buffer.strip():
        yield buffer.decode("utf-8", errors="replace")


__all__ = ["APPLY_PATCH", "FIELD_MANAGER", "NETWORK_ERRORS", "ClusterConnection", "KubeApi"]
