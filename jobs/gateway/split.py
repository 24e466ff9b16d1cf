"""A Canary rollout's split: which revision answers a request. Pure: the route (with its
rollout, as the snapshot loaded it from the database), the key and the request's affinity key
in, the route of the revision that answers and its number out.

A caller is sticky: the key's id and the conversation's affinity key (replica_choice's hash of
the first messages) hash to a bucket from 0 to 99, and the canary answers the buckets below its
weight. As the weight rises the canary keeps every caller it had, and a conversation never
bounces between revisions within a step. Requests without an affinity key (embeddings, scores)
stick by the key alone. A benchmark's load names its revision, and goes to that one only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

RUNNING = "Running"  # as snapshot.RUNNING (which imports this module)


@dataclass(frozen=True, slots=True)
class Canary:
    stable_revision: int
    revision: int
    weight: int  # percent of the buckets the canary answers
    replicas: tuple[str, ...]  # the canary's ready replicas


def bucket(key_id: int, affinity: int | None) -> int:
    """0 to 99, the same in every gateway process for one key and conversation."""
    text = f"{key_id}:{'' if affinity is None else affinity}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") % 100


def pick(route, key_id: int, affinity: int | None, revision: int | None = None):
    """(the route to send to, the revision metered) for one request. Without a rollout the
    route itself and None. A canary with no ready replica takes nothing; a stable revision with
    none (it is being replaced at promotion) sends everything to the canary. `revision`: a
    benchmark's, which takes its revision whatever the split (the canary while it has a ready
    replica)."""
    canary: Canary | None = route.canary
    if canary is None:
        return route, None
    if revision == canary.stable_revision:
        return route, canary.stable_revision
    if revision == canary.revision:
        to_canary = bool(canary.replicas)
    else:
        to_canary = bool(canary.replicas) and (
            not route.running or bucket(key_id, affinity) < canary.weight
        )
    if not to_canary:
        return route, canary.stable_revision
    routed = replace(
        route,
        phase=RUNNING,
        upstream=canary.replicas[0],
        replicas=canary.replicas,
        canary=None,
    )
    return routed, canary.revision


def with_rollout(route, stable_revision: int, revision: int, weight: int, replicas, state: str):
    """The route as the snapshot keeps it during a rollout. While the stable revision is being
    replaced by the promoted one (Promoting), the route is Running on the canary's replicas
    if the stable ones are not: a caller never waits for a model that is serving."""
    canary_replicas = tuple(sorted({r.rstrip("/") for r in replicas if isinstance(r, str) and r}))
    canary = Canary(stable_revision, revision, max(0, min(int(weight), 100)), canary_replicas)
    if state == "Promoting" and canary_replicas and not route.running:
        return replace(
            route,
            phase=RUNNING,
            upstream=canary_replicas[0],
            replicas=canary_replicas,
            canary=Canary(stable_revision, revision, 100, canary_replicas),
        )
    return replace(route, canary=canary)
