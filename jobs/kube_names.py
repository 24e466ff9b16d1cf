"""The names an application's objects have on a cluster, in one place for those who make them
(the renderers), read them (derive_vm_status) and call them (the gateway): KServe's
`<name>-predictor` Service, and for virtual machines `<name>-r<replica>-n<node>` with the labels
that say which replica and node a machine is, and a Canary rollout's second InferenceService
`<name>-canary` with the label that keeps it apart from the stable one. Plain strings: importing
this loads nothing.
"""

from __future__ import annotations

PREDICTOR_SUFFIX = "-predictor"
REPLICA_LABEL = "servedeck.io/replica"
NODE_LABEL = "servedeck.io/node"
ROLE_LABEL = "servedeck.io/role"
# A Canary rollout on Kubernetes: the canary's objects carry the application's own label (they
# are its objects: deleting it deletes them) and this one, so the stable revision's apply, status,
# restart and logs leave them out, and the canary's own verbs take only them.
TRACK_LABEL = "servedeck.io/track"
CANARY_TRACK = "canary"
CANARY_SUFFIX = "-canary"


def predictor_service(name: str) -> str:
    """KServe names the predictor's Service so; virtual machines' ready leaders get the same."""
    return f"{name}{PREDICTOR_SUFFIX}"


def predictor_url(name: str, namespace: str) -> str:
    """The predictor Service inside the cluster: where the gateway sends requests."""
    return f"http://{predictor_service(name)}.{namespace}.svc.cluster.local"


def canary_name(name: str) -> str:
    """The canary's InferenceService during a rollout (its Service: <name>-canary-predictor)."""
    return f"{name}{CANARY_SUFFIX}"


def track_of(obj) -> str:
    """CANARY_TRACK for a canary's object, "" for the stable revision's (no track label)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(TRACK_LABEL) or ""


def about_canary(name: str, app: str) -> bool:
    """Whether an object named `name` (an event's subject) is the canary's of `app`: its
    InferenceService or what KServe names after it (<app>-canary-predictor-…)."""
    canary = canary_name(app)
    return name == canary or name.startswith(f"{canary}-")


def vm_name(app: str, replica: int, node: int) -> str:
    """A virtual machine (and its instance) of a replica; node 0 leads the replica."""
    return f"{app}-r{replica}-n{node}"


def weights_claim_name(app: str, replica: int) -> str:
    return f"{app}-weights-r{replica}"


def peers_service_name(app: str) -> str:
    return f"{app}-nodes"


def peers_policy_name(app: str, replica: int) -> str:
    """The NetworkPolicy that opens a multi-node replica's machines to each other."""
    return f"{app}-peers-r{replica}"


def guest_files_name(app: str) -> str:
    """The ConfigMap of the files every machine's guest reads at boot (launcher, plans)."""
    return f"{app}-guest"
