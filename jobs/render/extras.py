"""The objects beside the InferenceService: the weight cache (KServe LocalModelCache) and the
public route (Gateway API HTTPRoute) of an application exposed on a verified domain.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .common import KSERVE_ALPHA_API, NAMESPACE_LABEL, metadata

GATEWAY_API = "gateway.networking.k8s.io/v1"
GATEWAY_GROUP = "gateway.networking.k8s.io"
PREDICTOR_PORT = 80  # KServe's Standard-mode predictor Service listens on 80


def cache_name(namespace: str, name: str, uri: str) -> str:
    # LocalModelCache is cluster-scoped, so the namespace is part of the name; and its
    # sourceModelUri is immutable, so the uri's hash is too: a corrected uri makes a new cache
    # instead of an update the API server refuses.
    digest = hashlib.sha256(uri.encode()).hexdigest()[:8]
    return f"{namespace}-{name}-{digest}"


def local_model_cache(
    name: str, namespace: str, labels: dict[str, str], uri: str, size: str, node_group: str
) -> dict[str, Any]:
    return {
        "apiVersion": KSERVE_ALPHA_API,
        "kind": "LocalModelCache",
        "metadata": metadata(
            cache_name(namespace, name, uri), None, {**labels, NAMESPACE_LABEL: namespace}
        ),
        "spec": {"sourceModelUri": uri, "modelSize": size, "nodeGroups": [node_group]},
    }


def http_route(
    name: str,
    namespace: str,
    labels: dict[str, str],
    domain: str,
    gateway_name: str,
    gateway_namespace: str,
    gateway_service: tuple[str, str, int],
) -> dict[str, Any]:
    """`<name>.<domain>` on the cluster's shared Gateway, to ServeDeck's gateway Service
    (namespace, name, port): it checks the caller's key and the application's access policy,
    then proxies to the predictor by host name (with the runtime's OpenAI prefix), so no
    request reaches the model server unchecked. The Gateway's listener must allow routes from
    this namespace (allowedRoutes.namespaces), and a ReferenceGrant in the gateway Service's
    namespace must allow HTTPRoutes from it (the operator installs both)."""
    service_namespace, service_name, port = gateway_service
    backend = {"kind": "Service", "name": service_name, "port": port}
    if service_namespace != namespace:
        backend["namespace"] = service_namespace
    rules = [
        {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [backend]}
    ]
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": metadata(name, namespace, labels),
        "spec": {
            "parentRefs": [
                {
                    "group": GATEWAY_GROUP,
                    "kind": "Gateway",
                    "name": gateway_name,
                    "namespace": gateway_namespace,
                }
            ],
            "hostnames": [f"{name}.{domain}"],
            "rules": rules,
        },
    }
