"""The KubeVirt renderer: an application with runtime.isolation VirtualMachine as KubeVirt
VirtualMachines (one per node of each replica; the VirtualMachine keeps its instance running
and is what stop halts), a weight volume per replica, the files the guests start from, the
Services the gateway and the replica's nodes reach, and NetworkPolicies that open only the
leaders' serving port to the gateway's namespace, and each replica's machines to each other
(Ray and the pipeline's traffic), never to another replica's.

Names, for application `llama` with 2 replicas of 2 nodes: VirtualMachines llama-r0-n0
(replica 0's leader), llama-r0-n1, llama-r1-n0, llama-r1-n1; PersistentVolumeClaims
llama-weights-r0, llama-weights-r1; ConfigMap llama-guest (the launcher and each machine's
start plan, cloud_init.py); Service llama-predictor (the ready leaders, as KServe names a
predictor, so the gateway routes to it alike) and llama-nodes (headless: the leaders' DNS
names for the workers); NetworkPolicies llama (the serving port), llama-peers-r0 and
llama-peers-r1.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from jobs.kube_names import (
    NODE_LABEL,
    REPLICA_LABEL,
    ROLE_LABEL,
    guest_files_name,
    peers_policy_name,
    peers_service_name,
    predictor_service,
    vm_name,
    weights_claim_name,
)
from jobs.machine_catalog import gpu_kinds, kubevirt_device_name
from jobs.manifest.problems import show
from jobs.manifest.quantity import parse_bytes
from jobs.manifest.uri import UriError, parse_uri
from jobs.manifest.view import dig

from .cloud_init import (
    GUEST_SERIAL,
    HF_TOKEN_DIR,
    HF_TOKEN_SERIAL,
    MODELS_DIR,
    MODELS_TAG,
    WEIGHTS_DIR,
    WEIGHTS_TAG,
    StartPlan,
    guest_digest,
    guest_files,
    user_data,
)
from .common import ORGANIZATION_LABEL, RenderError, metadata, quantity_text
from .engine import HF_TOKEN_KEY, engine_args, engine_env
from .placement import gpu_of, node_affinity
from .runtimes import PARAKEET_PORT
from .target import RenderTarget

KUBEVIRT_API = "kubevirt.io/v1"
# Set by Kubernetes on every namespace (1.22 and later): how a policy names one.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
TEMPLATE_HASH = "servedeck.io/template-hash"
LEADER, WORKER = "leader", "worker"
VLLM_PORT = 8000
SERVICE_PORT = 80  # as KServe's predictor Service: the gateway's upstream is the same URL
RAY_PORT = 6379
READINESS_PATH = "/v1/models"
ENGINES = ("vllm", "parakeet")
SCHEMES = ("hf", "pvc")
HOSTNAME_MAX = 63
GIB = 2**30
M = "spec.source.model"


def vm_objects(
    model: Mapping[str, Any],
    name: str,
    namespace: str,
    labels: dict[str, str],
    target: RenderTarget,
) -> list[dict[str, Any]]:
    """Every object of a VirtualMachine application, in apply order: volumes, Services and
    the NetworkPolicy before the machines that use them."""
    plan = _Layout(model, name, namespace, target)
    base = dict(labels)
    if target.organization:
        # On the instance template too: KubeVirt copies it onto the instances and their
        # virt-launcher pods, which the Services, the policy and the backend select by it.
        base[ORGANIZATION_LABEL] = target.organization
    grid = [(r, n) for r in range(plan.replicas) for n in range(plan.nodes)]
    files = guest_files({vm_name(name, r, n): plan.start_plan(r, n) for r, n in grid})
    objects: list[dict[str, Any]] = []
    if plan.downloads:
        objects += [plan.weights_claim(r, base) for r in range(plan.replicas)]
    objects.append(plan.guest_config(base, files))
    objects.append(plan.service(base))
    if plan.nodes > 1:
        objects.append(plan.peers_service(base))
    objects.append(plan.network_policy(base))
    if plan.nodes > 1:
        objects += [plan.peers_policy(r, base) for r in range(plan.replicas)]
    for r, n in grid:
        objects.append(plan.virtual_machine(r, n, base, guest_digest(files, vm_name(name, r, n))))
    return objects


def template_hash(labels: Mapping[str, str], spec: Mapping[str, Any], guest: str = "") -> str:
    """What an instance was made from (its labels, spec, and the digest of the guest files it
    reads): KubeVirt does not restart a running instance when its machine's template changes,
    so the backend replaces the instances whose hash differs."""
    made = {"labels": labels, "spec": spec, "guest": guest}
    text = json.dumps(made, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Layout:
    """The decisions for one application, made once: engine, artifact, hardware, replicas."""

    def __init__(
        self, model: Mapping[str, Any], name: str, namespace: str, target: RenderTarget
    ) -> None:
        self.model, self.name, self.namespace, self.target = model, name, namespace, target
        self.engine = dig(model, "runtime", "engine")
        if self.engine not in ENGINES:
            raise RenderError(
                f"{M}.runtime.engine: {show(self.engine)} with isolation VirtualMachine; a virtual "
                f"machine runs {' or '.join(ENGINES)}. Set isolation to Container for that runtime."
            )
        self.resources = model["resources"]
        self.gpu = gpu_of(self.resources)
        self.nodes = int(self.resources.get("nodesPerReplica") or 1)
        scaling = model["scaling"]
        low, high = scaling["minReplicas"], scaling.get("maxReplicas") or scaling["minReplicas"]
        if high > low:
            raise RenderError(
                f"{M}.scaling.maxReplicas: {high} is above minReplicas {low}; virtual machines "
                f"run a fixed number of replicas, accepts {low}. Set maxReplicas to minReplicas, "
                "or set isolation to Container to autoscale."
            )
        self.replicas = int(low)
        width = len(vm_name(name, self.replicas - 1, self.nodes - 1))
        if width > HOSTNAME_MAX:
            raise RenderError(
                f"spec.name: {name!r} makes machine names of {width} characters (at most "
                f"{HOSTNAME_MAX}, a host name); shorten the name or use fewer replicas."
            )
        try:
            self.uri = parse_uri(model["uri"])
        except UriError as error:
            raise RenderError(f"{M}.uri: {error}") from None
        if self.uri.scheme not in SCHEMES:
            raise RenderError(
                f"{M}.uri: {self.uri.scheme}:// with isolation VirtualMachine; a virtual machine "
                "reads hf:// (downloaded once into the replica's volume) or pvc://<claim>/<path>. "
                "Copy the weights to a PersistentVolumeClaim, or set isolation to Container."
            )
        if dig(model, "cache", "enabled"):
            raise RenderError(
                f"{M}.cache.enabled: true with isolation VirtualMachine; a virtual machine keeps "
                "the weights on its replica's own volume, not in KServe's weight cache, so it "
                "accepts false. Remove the cache block."
            )
        self.downloads = self.uri.scheme == "hf"
        self.device = None
        if self.gpu is not None:
            kind = target.gpu_kind(self.gpu.get("model"))
            if kind is None:
                raise RenderError(self._no_gpu_kind(self.gpu.get("model")))
            self.device = kubevirt_device_name(kind)
            if self.device is None:
                raise RenderError(
                    f"{M}.resources.accelerator.gpu.model: {kind['name']!r} has no KubeVirt "
                    "device name in the profile's machine catalog; ask an admin to add "
                    "kubevirtDeviceName (as the cluster's permittedHostDevices name it) to it."
                )
        self.port = VLLM_PORT if self.engine == "vllm" else PARAKEET_PORT
        self.affinity = node_affinity(self.resources, target)

    def _no_gpu_kind(self, model: object) -> str:
        """Why a virtual machine's GPUs cannot be given it: no kind named, or one the catalog
        lacks (the value shown as written, never as Python's None)."""
        kinds = [kind["name"] for kind in gpu_kinds(self.target.machine_catalog)]
        offered = f"one of {', '.join(kinds)}" if kinds else "a GPU kind added to it first"
        field = f"{M}.resources.accelerator.gpu.model"
        why = (
            "a GPU is passed through to a virtual machine by its device name, so it needs a "
            "GPU kind of the profile's machine catalog"
        )
        if model is None:
            return (
                f"{field}: not set, and no GPU kind of the profile's machine catalog is known to "
                f"hold the model on the GPUs asked (Check model could not size it, or none "
                f"does); {why}. Set gpu.model to {offered}."
            )
        return f"{field}: {show(model)} is not in the profile's machine catalog; {why}. " + (
            f"Set gpu.model to {offered}."
        )

    # --- labels and selectors ---------------------------------------------------------------

    def _replica_labels(self, base: dict[str, str], replica: int, node: int) -> dict[str, str]:
        role = LEADER if node == 0 else WORKER
        return {
            **base,
            REPLICA_LABEL: str(replica),
            NODE_LABEL: str(node),
            ROLE_LABEL: role,
        }

    @staticmethod
    def _selector(base: dict[str, str], **more: str) -> dict[str, str]:
        keys = [k for k in base if k != "app.kubernetes.io/managed-by"]
        return {**{k: base[k] for k in keys}, **more}

    # --- objects ---------------------------------------------------------------------------

    def weights_claim(self, replica: int, base: dict[str, str]) -> dict[str, Any]:
        # Every node of a multi-node replica reads the same weights: shared, so ReadWriteMany.
        access = "ReadWriteMany" if self.nodes > 1 else "ReadWriteOnce"
        spec: dict[str, Any] = {
            "accessModes": [access],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": self._weights_size()}},
        }
        if self.target.weights_storage_class:
            spec["storageClassName"] = self.target.weights_storage_class
        labels = {**base, REPLICA_LABEL: str(replica)}
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": metadata(weights_claim_name(self.name, replica), self.namespace, labels),
            "spec": spec,
        }

    def _weights_size(self) -> str:
        """The memory that must hold the weights (the replica's GPUs, else its memory): the
        weights cannot be larger, so they always fit."""
        if self.gpu is not None:
            kind = self.target.gpu_kind(self.gpu.get("model")) or {}
            per_gpu = parse_bytes(kind.get("gpuMemory") or "80Gi")
            total = per_gpu * int(self.gpu["countPerReplica"]) * self.nodes
        else:
            total = parse_bytes(quantity_text(self.resources["memory"]))
        return f"{max(1, math.ceil(total / GIB))}Gi"

    def service(self, base: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(predictor_service(self.name), self.namespace, base),
            "spec": {
                # Ready leaders only: a leader is ready when its model server answers
                # GET /v1/models (the readiness probe KubeVirt reports on its pod).
                "selector": self._selector(base, **{ROLE_LABEL: LEADER}),
                "ports": [
                    {
                        "name": "http",
                        "port": SERVICE_PORT,
                        "targetPort": self.port,
                        "protocol": "TCP",
                    }
                ],
            },
        }

    def peers_service(self, base: dict[str, str]) -> dict[str, Any]:
        """Headless, so each machine's hostname.subdomain resolves before it is ready: the
        workers reach their leader's Ray head while the model is still loading."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(peers_service_name(self.name), self.namespace, base),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": self._selector(base),
                "ports": [{"name": "ray", "port": RAY_PORT, "protocol": "TCP"}],
            },
        }

    def network_policy(self, base: dict[str, str]) -> dict[str, Any]:
        """The leaders' serving port, open to the callers' namespaces only: the gateway sends
        every request (the kubelet's probes come from the node, which a NetworkPolicy always
        lets through). Workers serve nothing; they are the replica's (peers_policy)."""
        served: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": self.port}]}
        callers = self.target.vm_caller_namespaces
        if callers and "*" not in callers:
            served["from"] = [
                {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}
                for namespace in callers
            ]
        leaders = self._selector(base, **{ROLE_LABEL: LEADER})
        return self._policy(self.name, base, leaders, [served])

    def peers_policy(self, replica: int, base: dict[str, str]) -> dict[str, Any]:
        """Ray and the pipeline stages' NCCL traffic use ports chosen at run time: open between
        the machines of one replica, never to another replica's."""
        machines = self._selector(base, **{REPLICA_LABEL: str(replica)})
        peers = [{"from": [{"podSelector": {"matchLabels": dict(machines)}}]}]
        return self._policy(peers_policy_name(self.name, replica), base, machines, peers)

    def _policy(
        self, name: str, base: dict[str, str], selected: dict[str, str], ingress: list
    ) -> dict[str, Any]:
        # Selecting a machine isolates it: only what some policy's ingress allows comes in.
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(name, self.namespace, base),
            "spec": {
                "podSelector": {"matchLabels": selected},
                "policyTypes": ["Ingress"],
                "ingress": ingress,
            },
        }

    def guest_config(self, base: dict[str, str], files: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(guest_files_name(self.name), self.namespace, base),
            "data": files,
        }

    def virtual_machine(
        self, replica: int, node: int, base: dict[str, str], guest: str
    ) -> dict[str, Any]:
        labels = self._replica_labels(base, replica, node)
        name = vm_name(self.name, replica, node)
        spec = self._instance_spec(replica, node, base)
        return {
            "apiVersion": KUBEVIRT_API,
            "kind": "VirtualMachine",
            "metadata": metadata(name, self.namespace, labels),
            "spec": {
                "runStrategy": "Always",
                "template": {
                    "metadata": {
                        "labels": dict(labels),
                        "annotations": {TEMPLATE_HASH: template_hash(labels, spec, guest)},
                    },
                    "spec": spec,
                },
            },
        }

    def _instance_spec(self, replica: int, node: int, base: dict[str, str]) -> dict[str, Any]:
        leader = node == 0
        disks: list[dict[str, Any]] = [
            {"name": "rootdisk", "disk": {"bus": "virtio"}},
            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
            {"name": "guest", "serial": GUEST_SERIAL, "disk": {}},
        ]
        image = (
            self.target.vllm_vm_image if self.engine == "vllm" else self.target.parakeet_vm_image
        )
        volumes: list[dict[str, Any]] = [
            {"name": "rootdisk", "containerDisk": {"image": image}},
            {"name": "guest", "configMap": {"name": guest_files_name(self.name)}},
        ]
        filesystems: list[dict[str, Any]] = []
        secret = self.target.hf_secret_name if self.downloads else None
        if self.downloads:
            filesystems.append({"name": WEIGHTS_TAG, "virtiofs": {}})
            claim = weights_claim_name(self.name, replica)
            volumes.append({"name": WEIGHTS_TAG, "persistentVolumeClaim": {"claimName": claim}})
        else:
            filesystems.append({"name": MODELS_TAG, "virtiofs": {}})
            claim = self.model["uri"][len("pvc://") :].split("/", 1)[0]
            volumes.append(
                {
                    "name": MODELS_TAG,
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                }
            )
        if secret and leader:
            disks.append({"name": HF_TOKEN_SERIAL, "serial": HF_TOKEN_SERIAL, "disk": {}})
            volumes.append({"name": HF_TOKEN_SERIAL, "secret": {"secretName": secret}})
        data = user_data(
            vm_name(self.name, replica, node),
            weights=self.downloads,
            models=not self.downloads,
            hf_token=bool(secret and leader),
        )
        volumes.insert(1, {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": data}})
        devices: dict[str, Any] = {
            "disks": disks,
            "filesystems": filesystems,
            "interfaces": [self._interface()],
        }
        if self.gpu is not None:
            count = int(self.gpu["countPerReplica"])
            devices["gpus"] = [{"name": f"gpu{i}", "deviceName": self.device} for i in range(count)]
        amounts = {
            "cpu": quantity_text(self.resources["cpu"]),
            "memory": quantity_text(self.resources["memory"]),
        }
        spec: dict[str, Any] = {
            "domain": {
                "devices": devices,
                "resources": {"requests": dict(amounts), "limits": dict(amounts)},
            },
            "hostname": vm_name(self.name, replica, node),
            "networks": [{"name": "default", "pod": {}}],
            "volumes": volumes,
            # Passed-through GPUs cannot move with a live migration: a drain stops it instead.
            "evictionStrategy": "None",
        }
        if self.nodes > 1:
            spec["subdomain"] = peers_service_name(self.name)
        affinity = self._affinity(replica, base)
        if affinity:
            spec["affinity"] = affinity
        if leader:
            spec["readinessProbe"] = {
                "httpGet": {"path": READINESS_PATH, "port": self.port},
                "initialDelaySeconds": 30,
                "periodSeconds": 10,
                "timeoutSeconds": 5,
                "failureThreshold": 6,
            }
        return spec

    def _interface(self) -> dict[str, Any]:
        """The pod network's interface. Masquerade NATs the guest behind the pod's address (the
        guest sees 10.0.2.2, the same on every machine), which serves HTTP through the pod but
        cannot carry Ray and NCCL: each machine advertises its own address to the others. So a
        multi-node replica's machines are bridged: the guest takes the pod's address (KubeVirt's
        DHCP hands it over). KubeVirt refuses to live-migrate a bridged instance on the pod
        network, which costs nothing here (evictionStrategy None, GPUs passed through)."""
        if self.nodes > 1:
            return {"name": "default", "bridge": {}}
        return {"name": "default", "masquerade": {}}

    def _affinity(self, replica: int, base: dict[str, str]) -> dict[str, Any]:
        affinity: dict[str, Any] = dict(self.affinity or {})
        if self.nodes > 1:
            # One machine per node: the replica's machines never share one.
            selector = self._selector(base, **{REPLICA_LABEL: str(replica)})
            affinity["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": selector},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        return affinity

    # --- what each machine runs -------------------------------------------------------------

    def _model_path(self) -> str:
        if self.downloads:
            return f"{WEIGHTS_DIR}/model"
        inner = self.model["uri"][len("pvc://") :].split("/", 1)[1]
        return f"{MODELS_DIR}/{inner}"

    def _env(self, leader: bool) -> dict[str, str]:
        # The server's own variables on every machine of the replica: Ray's workers inherit
        # them from `ray start`, as the leader's server does from the launcher.
        env = engine_env(self.model, self.engine, self.gpu is not None)
        if self.downloads:
            env["HF_HOME"] = f"{WEIGHTS_DIR}/huggingface"
        if self.downloads and leader and self.target.hf_secret_name:
            # huggingface_hub reads the token from this file; its value never enters the plan.
            env["HF_TOKEN_PATH"] = f"{HF_TOKEN_DIR}/{HF_TOKEN_KEY}"
        return env

    def start_plan(self, replica: int, node: int) -> StartPlan:
        plan = self._plan(replica) if node == 0 else self._worker_plan(replica)
        mounts = {WEIGHTS_DIR: WEIGHTS_TAG} if self.downloads else {MODELS_DIR: MODELS_TAG}
        return replace(
            plan,
            mounts=mounts,
            # The leader's readiness probe asks this port; its launcher answers until the
            # server starts (downloading, or refusing), so the status can say which.
            probe_port=self.port if node == 0 else None,
            advertise=self._peer_address(replica, node) if self.nodes > 1 else None,
        )

    def _peer_address(self, replica: int, node: int) -> str:
        """How the replica's machines reach this one: its name in the headless Service."""
        peers = peers_service_name(self.name)
        return f"{vm_name(self.name, replica, node)}.{peers}.{self.namespace}.svc.cluster.local"

    def _plan(self, replica: int) -> StartPlan:
        path = self._model_path()
        download = None
        if self.downloads:
            download = {"repo": self.uri.hf_repo or "", "to": path}
            if self.uri.hf_revision:
                download["revision"] = self.uri.hf_revision
        on_gpu = self.gpu is not None
        if self.engine == "parakeet":
            argv = (
                "parakeet-server",
                f"--model_name={self.name}",
                f"--model_dir={path}",
                f"--http_port={PARAKEET_PORT}",
                *engine_args(self.model, self.engine, on_gpu),
            )
            return StartPlan(exec=argv, env=self._env(True), download=download)
        # One model copy spans the replica's nodes: pipeline parallel size = nodes per replica
        # (manifest.parse refuses any other), tensor parallel size = the GPUs of one node.
        engine = {**(self.model.get("engine") or {})}
        engine["pipelineParallelSize"] = self.nodes
        model = {**self.model, "engine": engine}
        argv = [
            "vllm",
            "serve",
            path,
            "--host=0.0.0.0",
            f"--port={VLLM_PORT}",
            f"--served-model-name={self.name}",
        ]
        steps: tuple[tuple[str, ...], ...] = ()
        if self.nodes > 1:
            argv.append("--distributed-executor-backend=ray")
            # `ray stop` first: after a restart of the unit the old head must not block the new.
            steps = (
                ("ray", "stop"),
                ("ray", "start", "--head", f"--port={RAY_PORT}", "--disable-usage-stats"),
            )
        argv += engine_args(model, "vllm", on_gpu)
        return StartPlan(exec=tuple(argv), steps=steps, env=self._env(True), download=download)

    def _worker_plan(self, replica: int) -> StartPlan:
        argv = (
            "ray",
            "start",
            f"--address={self._peer_address(replica, 0)}:{RAY_PORT}",
            "--block",
            "--disable-usage-stats",
        )
        return StartPlan(exec=argv, env=self._env(False))
