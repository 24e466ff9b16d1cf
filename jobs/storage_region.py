"""Whether a cluster downloads a model across regions: the cluster's region from its nodes'
labels, the bucket's from its storage, and the dry run's warning when they differ, saying what
it costs in kind and how to avoid it.

Pure: the reads are jobs.download_cost's (the nodes through the Kubernetes backend, the bucket
through models_catalog's storage readers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The well-known label the kubelet (or the cloud's node controller) sets on every node.
REGION_LABEL = "topology.kubernetes.io/region"
# One list call reads at most this many nodes: a cluster's nodes share their region or spread
# over a handful, so a page of them says which.
NODES_READ = 100
# What a region looks like on every cloud (us-east-1, europe-west4, westeurope, EU): anything
# else read from a label or a storage answer is not repeated in a message.
REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")
URI = "spec.source.model.uri"


def regions(values: Iterable[str | None]) -> tuple[str, ...]:
    """The distinct regions among label values or storage answers, lowercase (GCS says
    US-CENTRAL1 where GKE's nodes say us-central1), leaving out what is not a region."""
    found = {v.strip().lower() for v in values if v and REGION.fullmatch(v.strip())}
    return tuple(sorted(found))


def single_region(scheme: str, location: str | None) -> str | None:
    """The bucket's location when it is one region; None for a GCS multi-region or
    dual-region (US, EU, ASIA, NAM4, EUR4: no hyphen, unlike any of its regions), which
    serves a cluster in one of its regions without an inter-region charge, or is not
    comparable with one region."""
    if not location:
        return None
    if scheme == "gs" and "-" not in location:
        return None
    return location


def region_warning(
    uri: str,
    bucket_region: str | None,
    cluster_regions: Iterable[str],
    cluster: str,
    *,
    cache_enabled: bool = False,
) -> str | None:
    """The warning for a model at `uri` whose storage is in `bucket_region`, served on cluster
    `cluster` whose nodes are in `cluster_regions`; None when either is unknown (nothing read,
    nothing said) or the bucket is in a region the cluster has nodes in."""
    (bucket,) = regions([bucket_region]) or (None,)
    nodes = regions(cluster_regions)
    if bucket is None or not nodes or bucket in nodes:
        return None
    where = " and ".join(nodes)
    copy_to = nodes[0] if len(nodes) == 1 else f"one of {', '.join(nodes)}"
    shown = uri.partition("?")[0]
    if cache_enabled:
        fix = (
            f"The weight cache ({URI.rpartition('.')[0]}.cache) downloads it once per node "
            "rather than at each replica's start, but still across regions; a copy of the "
            f"model in a bucket in {copy_to}, named in {URI}, ends the charge."
        )
    else:
        fix = (
            f"Copy the model to a bucket in {copy_to} and set {URI} to that copy, or set "
            f"{URI.rpartition('.')[0]}.cache.enabled: true (KServe's weight cache downloads it "
            "once per node rather than at each replica's start)."
        )
    return (
        f"{shown} is in region {bucket}, and cluster {cluster}'s nodes are in {where} (their "
        f"{REGION_LABEL} label): every download of the weights crosses regions, which the "
        "cloud charges per GB as inter-region data transfer (and per GB again where the nodes "
        f"reach the storage through a NAT gateway). {fix}"
    )
