"""Cluster backends: how a profile's cluster runs what a revision describes.

No backend is installed yet: a saved application stays Pending and says so, rather than
pretending to run. The Kubernetes (KServe) and local backends plug in here.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Unavailable:
    reason: str
    next_step: str


def backend_for(profile):
    """The backend that runs `profile`'s cluster, or Unavailable saying why there is none."""
    cluster = profile.cluster
    return Unavailable(
        reason=(
            f"Profile {profile.name} runs on cluster {cluster.name} (backend {cluster.backend}), "
            f"and this version of ServeDeck has no {cluster.backend} backend yet, so nothing "
            "has been started."
        ),
        next_step=(
            "The application and its revision are saved; it will be deployed when the "
            f"{cluster.backend} backend is available. Nothing to do now."
        ),
    )
