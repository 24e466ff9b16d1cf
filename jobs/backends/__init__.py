"""Cluster backends: how a profile's cluster runs what a revision describes.

`backend_for(profile)` answers an object with one interface whatever the cluster
(jobs.backends.base.Backend): preflight (the dry run's checks on the target), apply, restart,
stop, start, delete, observe. The contract is in base.py, each backend in its own package.
"""

from jobs.backends.base import Backend
from jobs.backends.local.backend import LocalBackend, local_runner


def backend_for(profile) -> Backend:
    """The backend that runs `profile`'s cluster."""
    cluster = profile.cluster
    if cluster.backend == cluster.Backend.LOCAL:
        return LocalBackend(local_runner(profile.organization.slug), profile)
    from jobs.backends.kubernetes.backend import ClusterBackend  # loads the client when needed

    return ClusterBackend(profile)
