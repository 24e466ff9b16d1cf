"""The ready replicas of an application on Kubernetes, read from its predictor Service's
EndpointSlices: the addresses the gateway routes across. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobs.kube_names import PREDICTOR_SUFFIX

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def application_of_slice(obj: dict[str, Any]) -> str | None:
    """The application whose predictor Service the EndpointSlice belongs to, if any."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    service = labels.get(SERVICE_NAME_LABEL)
    if not isinstance(service, str) or not service.endswith(PREDICTOR_SUFFIX):
        return None
    return service[: -len(PREDICTOR_SUFFIX)] or None


def ready_endpoints(slices: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """http://<address>:<port> of every ready endpoint, sorted (every gateway process builds
    the same hash ring from them). An endpoint whose `ready` is absent counts as ready, as
    Kubernetes says; a terminating one does not."""
    found: set[str] = set()
    for obj in slices:
        ports = [p for p in obj.get("ports") or [] if isinstance(p, dict) and p.get("port")]
        if not ports:
            continue
        port = ports[0]["port"]
        family = obj.get("addressType") or "IPv4"
        for endpoint in obj.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            for address in endpoint.get("addresses") or []:
                if family == "FQDN":
                    continue
                host = f"[{address}]" if family == "IPv6" else address
                found.add(f"http://{host}:{port}")
    return tuple(sorted(found))
