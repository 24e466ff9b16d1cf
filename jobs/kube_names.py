"""The names an application's objects have on a cluster, in one place for those who make them
(the renderers), read them (derive_vm_status) and call them (the gateway): KServe's
`<name>-predictor` Service, and for virtual machines `<name>-r<replica>-n<node>` with the labels
that say which replica and node a machine is. Plain strings: importing this loads nothing.
"""

from __future__ import annotations

PREDICTOR_SUFFIX = "-predictor"
REPLICA_LABEL = "servedeck.io/replica"
NODE_LABEL = "servedeck.io/node"
ROLE_LABEL = "servedeck.io/role"


def predictor_service(name: str) -> str:
    """KServe names the predictor's Service so; virtual machines' ready leaders get the same."""
    return f"{name}{PREDICTOR_SUFFIX}"


def predictor_url(name: str, namespace: str) -> str:
    """The predictor Service inside the cluster: where the gateway sends requests."""
    return f"http://{predictor_service(name)}.{namespace}.svc.cluster.local"


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
