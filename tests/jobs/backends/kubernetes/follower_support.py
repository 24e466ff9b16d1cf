"""The reconciler's watches on the API emulator, run in the test's own thread: a follower of a
cluster whose rights are Roles in one namespace, and settle() for one round of its watches."""

from __future__ import annotations

from jobs.models import Cluster
from jobs.reconciler.watching import KINDS, ClusterFollower


def namespaced_follower(cluster: Cluster, kube, namespace: str) -> ClusterFollower:
    """A follower of `cluster` (watches time out after 1 s) with every kind listed, the
    emulator granting the console Roles in `namespace` only."""
    kube.namespaced_rbac(namespace)
    follower = ClusterFollower(cluster, watch_timeout=1)
    for kind in KINDS:
        follower.relist(kind)
    return follower


def settle(follower: ClusterFollower) -> None:
    """What the reconciler's threads do: each watch's round marks the applications its events
    are about, then drain records them."""
    for kind in KINDS:
        follower.watch_round(kind)
    follower.drain()
