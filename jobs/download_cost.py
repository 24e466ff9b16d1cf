"""The dry run's download-cost question for a Kubernetes profile: which region the cluster's
nodes are in (one bounded list of nodes through the Kubernetes backend's client) and which the
model's bucket is in (S3's or Google Cloud Storage's answer, with the profile's credentials),
within one time budget. Anything unknown, refused or late means no warning, never an error:
the deploy does not depend on it. The decision is jobs.storage_region's.
"""

from __future__ import annotations

import time

from django.conf import settings

from jobs.backends.kubernetes.backend import client_for
from jobs.backends.kubernetes.errors import BackendError
from jobs.storage_access import ANONYMOUS, profile_credentials
from jobs.storage_region import NODES_READ, REGION_LABEL, region_warning, single_region
from models_catalog.gcs_reads import GCSReader
from models_catalog.s3_reads import S3Reader
from models_catalog.storage_reads import StorageError

# Seconds both reads may take together (the nodes first, the bucket with what is left).
BUDGET_SECONDS = 4.0
# The reader of each scheme whose bucket's region can be read.
READERS = {"s3": S3Reader, "gs": GCSReader}


def cluster_regions(profile, seconds: float) -> list[str]:
    """The region label of (at most NODES_READ of) the profile's cluster's nodes; [] when the
    cluster does not answer, refuses the list (no `list` on nodes granted), or its nodes carry
    no such label."""
    try:
        return client_for(profile.cluster).node_label_values(REGION_LABEL, NODES_READ, seconds)
    except BackendError:
        return []


def bucket_region(uri: str, profile, seconds: float) -> str | None:
    """The region of the bucket `uri` names, read with the profile's storageCredentials
    (unsigned without any); None when it cannot be read."""
    scheme, _, rest = uri.partition("://")
    if scheme not in READERS or seconds <= 0:
        return None
    bucket = rest.partition("/")[0].partition("?")[0]
    credentials = profile_credentials(profile, settings.SERVEDECK_MACHINE_CREDENTIALS)
    reader = READERS[scheme](credentials or ANONYMOUS, seconds=seconds)
    try:
        return single_region(scheme, reader.bucket_region(bucket))
    except StorageError:
        return None


def download_cost_warning(
    uri: str, profile, *, cache_enabled: bool, seconds: float = BUDGET_SECONDS
) -> str | None:
    """The dry run's warning when `uri`'s bucket is in another region than the profile's
    cluster's nodes; None otherwise, or when either region is unknown."""
    if uri.partition("://")[0] not in READERS:
        return None
    deadline = time.monotonic() + seconds
    nodes = cluster_regions(profile, seconds)
    if not nodes:
        return None  # nothing to compare with: the bucket is not asked
    bucket = bucket_region(uri, profile, deadline - time.monotonic())
    return region_warning(uri, bucket, nodes, profile.cluster.name, cache_enabled=cache_enabled)
