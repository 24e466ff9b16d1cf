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


def predictor_service(name: str) -> str:
    return f"{name}-predictor"


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
    openai_prefix: str | None = None,
) -> dict[str, Any]:
    """`<name>.<domain>` on the shared gateway, to the predictor Service. The gateway's listener
    must allow routes from this namespace (allowedRoutes.namespaces).

    `openai_prefix`: where the runtime serves the OpenAI API when not at /v1 (KServe's Hugging
    Face server: /openai/v1), so clients still call https://<host>/v1/... as MANIFEST.md says."""
    rules: list[dict[str, Any]] = []
    if openai_prefix:
        rules.append(
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                "filters": [
                    {
                        "type": "URLRewrite",
                        "urlRewrite": {
                            "path": {
                                "type": "ReplacePrefixMatch",
                                "replacePrefixMatch": f"{openai_prefix}/v1",
                            }
                        },
                    }
                ],
                "backendRefs": [_backend(name)],
            }
        )
    rules.append(
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [_backend(name)],
        }
    )
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


def _backend(name: str) -> dict[str, Any]:
    return {"name": predictor_service(name), "port": PREDICTOR_PORT}
