"""The deploy/ folder as the tests read it: each overlay rendered by the kustomize inside
kubectl (as `kubectl apply -k` renders it), and the RBAC rules it grants the console's service
account, read from the rendered Roles, ClusterRoles and their bindings."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("dev", "production")
SERVICE_ACCOUNT = ("servedeck", "servedeck")  # (namespace, name) the console runs as


def kubectl() -> str:
    """kubectl's path; CI has it, so there a missing one fails instead of skipping."""
    found = shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is needed to render deploy/ (its built-in kustomize)")
        pytest.skip("kubectl is not installed")
    return found


@cache
def _render(path: str) -> tuple[dict, ...]:
    out = subprocess.run(
        [kubectl(), "kustomize", path],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def render(overlay: str) -> list[dict]:
    """Every object `kubectl kustomize deploy/overlays/<overlay>` prints."""
    return copy.deepcopy(list(_render(str(DEPLOY / "overlays" / overlay))))


@dataclass(frozen=True)
class Rule:
    """One verb on one resource, as one grant of a rule: where (a namespace, or None for a
    ClusterRole bound cluster-wide), the API group, the resource, the verb and the names it is
    limited to."""

    namespace: str | None
    group: str
    resource: str
    verb: str
    names: tuple[str, ...] = ()

    def as_rule(self) -> dict:
        rule = {"apiGroups": [self.group], "resources": [self.resource], "verbs": [self.verb]}
        if self.names:
            rule["resourceNames"] = list(self.names)
        return rule

    def __str__(self) -> str:
        where = self.namespace or "cluster"
        group = self.group or "core"
        limited = f"[{','.join(self.names)}]" if self.names else ""
        return f"{where}:{group}/{self.resource}{limited}:{self.verb}"


def granted_rules(objects: list[dict]) -> list[Rule]:
    """The rules the objects grant the console's service account, one Rule per verb and
    resource: a Role's through the RoleBindings of its namespace, a ClusterRole's through
    ClusterRoleBindings (everywhere) or RoleBindings (in their namespace)."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o.get("rules") or []
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    rules: set[Rule] = set()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = {
            (s.get("namespace"), s["name"])
            for s in binding.get("subjects") or []
            if s.get("kind") == "ServiceAccount"
        }
        if SERVICE_ACCOUNT not in subjects:
            continue
        where = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        ref = binding["roleRef"]
        role_namespace = where if ref["kind"] == "Role" else None
        for rule in roles[(ref["kind"], role_namespace, ref["name"])]:
            names = tuple(rule.get("resourceNames") or ())
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        rules.add(Rule(where, group, resource, verb, names))
    return sorted(rules, key=str)


def grants(rules: list[Rule]) -> tuple[dict[str, list[dict]], list[dict]]:
    """The emulator's `rbac(roles, cluster)` arguments for these rules."""
    roles: dict[str, list[dict]] = {}
    cluster: list[dict] = []
    for rule in rules:
        if rule.namespace is None:
            cluster.append(rule.as_rule())
        else:
            roles.setdefault(rule.namespace, []).append(rule.as_rule())
    return roles, cluster
