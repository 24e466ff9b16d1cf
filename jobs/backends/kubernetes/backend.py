"""A Kubernetes cluster with KServe behind the backend interface: render the revision, apply it,
and read the status back through derive_status.

One KServeClient (one API client) per cluster connection per process: building a client's
first API object costs about a second, every call after that milliseconds.
"""

import threading
from dataclasses import replace

from jobs.backends.base import BackendFailed, Observed, Preflight, target_answer
from jobs.backends.kubernetes.errors import BackendError, Unreachable
from jobs.backends.kubernetes.kinds import KUBEVIRT, RENDERED
from jobs.backends.kubernetes.kserve_client import KServeClient
from jobs.backends.kubernetes.kubevirt_client import (
    MachineObjects,
    Machines,
    is_virtual_machine_app,
)
from jobs.kube_names import CANARY_TRACK, canary_name, predictor_service, predictor_url
from jobs.machine_catalog import gpu_kind_named, kubevirt_device_name, unpermitted_gpu_kinds
from jobs.manifest.view import FilledManifest
from jobs.models import Phase
from jobs.render import RenderError, render_canary_for_profile, render_for_profile, with_revision
from jobs.status import MachineFacts, derive_status, derive_vm_status

# How far back sleep and wake look for the revision an application runs.
RECENT_REVISIONS = 20
_clients: dict[tuple, KServeClient] = {}
_clients_lock = threading.Lock()


def client_for(cluster) -> KServeClient:
    key = (cluster.pk, cluster.kubeconfig_path, cluster.context, cluster.in_cluster)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = KServeClient.for_cluster(cluster)
        return _clients[key]


def forget_clients() -> None:
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


def _where(application) -> tuple[str, str]:
    return application.name, application.manifest["spec"]["namespace"]


def _down(error: BackendError) -> bool:
    """The API server did not answer: the cluster is down for ServeDeck, the request is fine."""
    return isinstance(error, Unreachable)


def _org(application) -> str:
    """The organisation label its objects carry (jobs.render: the profile's organisation)."""
    return application.organization.slug


def _desired(manifest: dict) -> int:
    model = manifest["spec"]["source"].get("model") or {}
    return (model.get("scaling") or {}).get("minReplicas", 1)


def _awake(manifest: dict) -> int:
    """The replicas it runs while awake: minReplicas, one for a model that sleeps."""
    return max(_desired(manifest), 1)


class ClusterBackend:
    def __init__(self, profile):
        self.profile = profile
        self.client = client_for(profile.cluster)

    def _fail(self, error: BackendError) -> BackendFailed:
        return BackendFailed(error.reason, self._next_step(error), unavailable=_down(error))

    def _next_step(self, error: BackendError) -> str:
        if not _down(error):
            return error.next_step
        # Unreachable's own next step names the kubeconfig file: a path on the console's
        # host that members have no business seeing.
        return (
            f"Check that cluster {self.profile.cluster.name} is up and reachable from the "
            "console (an admin can check its connection under Clusters), then try again."
        )

    def _vm(self, application) -> bool:
        return is_virtual_machine_app(application.manifest)

    def _prune_kinds(self, manifest: dict) -> tuple:
        # Where KubeVirt is installed an application may have been rendered as machines before
        # (isolation can change until it has served): apply and delete look for those too, and
        # always for an application in machines (its Services and volumes outlive KubeVirt).
        kubevirt = "kubevirt" in (self.profile.cluster.addons or ())
        return RENDERED if kubevirt or is_virtual_machine_app(manifest) else ()

    def preflight(self, manifest: dict, objects: list) -> Preflight:
        """The cluster's server-side dry run of the rendered objects. Its answers are about the
        objects, not a manifest field: said at the profile, shown at Review."""
        device = _device_check(self.profile, manifest)
        if device is not None and device.level == "refusal":
            return Preflight(refusals=[device])
        warnings = [device] if device is not None else []
        try:
            refused = self.client.dry_run(objects)
        except Unreachable as error:
            said = (
                f"The server-side dry run on cluster {self.profile.cluster.name} could not "
                f"run: {error.reason} Everything else was checked. {self._next_step(error)}"
            )
            return Preflight(warnings=[*warnings, target_answer(said, level="warning")])
        except BackendError as error:
            return Preflight(refusals=[target_answer(f"{error.reason} {error.next_step}")])
        return Preflight(
            refusals=[target_answer(sentence) for sentence in refused], warnings=warnings
        )

    def gpus_here(self) -> None:
        """Unknown without asking the cluster: the profile's machine catalog says what it has."""
        return None

    def apply(self, application, revision, objects: list | None = None) -> Observed:
        if objects is None:
            objects = render_for_profile(revision.manifest, self.profile, revision=revision.number)
        else:  # the dry run's, rendered for this manifest on this profile a moment ago
            objects = with_revision(objects, revision.number)
        try:
            if is_virtual_machine_app(revision.manifest):
                where = (*_where(application), _org(application))
                objects = Machines(self.client).keep_halted(objects, *where)
            self.client.apply(objects, prune_kinds=self._prune_kinds(revision.manifest))
            if is_virtual_machine_app(revision.manifest):
                Machines(self.client).replace_outdated(
                    *_where(application), organization=_org(application)
                )
        except BackendError as error:
            raise self._fail(error) from None
        return Observed(
            phase=Phase.UPDATING if application.served_at else Phase.PENDING,
            reason=f"Revision {revision.number} is applied; waiting for the cluster to run it.",
            desired_replicas=_awake(revision.manifest),
        )

    def _then_observe(self, verb: str, application) -> Observed:
        target = Machines(self.client) if self._vm(application) else self.client
        try:
            getattr(target, verb)(*_where(application), organization=_org(application))
        except BackendError as error:
            raise self._fail(error) from None
        return self.observe(application)

    def restart(self, application) -> Observed:
        return self._then_observe("restart", application)

    def sleep(self, application) -> Observed:
        """Scale to zero (scaling.minReplicas 0, idle): apply its current revision rendered
        asleep, the predictor's minReplicas 0 with autoscalerClass none, so KServe sets its
        Deployment to zero replicas and no pod holds a GPU; the Service stays, its
        EndpointSlices empty."""
        self._apply_current(application, asleep=True)
        return self.observe(application)

    def wake(self, application) -> Observed:
        """The first request after a sleep: apply its current revision as deployed (one
        replica while awake); it reads Running once the predictor's endpoints are ready in
        its EndpointSlices (awaiting_endpoints), as the reconciler's watches see them."""
        self._apply_current(application, asleep=False)
        return Observed(
            phase=Phase.PENDING,
            reason=(
                f"{application.name} is waking: its predictor is scaled back up; it serves "
                "once a replica is ready."
            ),
            endpoint=application.endpoint,
            desired_replicas=_awake(application.manifest),
            replica_endpoints=(),
        )

    def _apply_current(self, application, *, asleep: bool) -> None:
        # The revision it runs (stamped as deploy stamps it): the latest with its manifest.
        number = next(
            (
                r.number
                for r in application.revisions.only("number", "manifest")[:RECENT_REVISIONS]
                if r.manifest == application.manifest
            ),
            None,
        )
        objects = render_for_profile(
            application.manifest, self.profile, revision=number, asleep=asleep
        )
        try:
            self.client.apply(objects, prune_kinds=self._prune_kinds(application.manifest))
        except BackendError as error:
            raise self._fail(error) from None

    def stop(self, application) -> Observed:
        return self._then_observe("stop", application)

    def start(self, application) -> Observed:
        if application.phase == Phase.SLEEPING:  # the page's Start on a model asleep wakes it
            return self.wake(application)
        return self._then_observe("start", application)

    def delete(self, application) -> Observed | None:
        """Delete its objects; None when the cluster has none left (the row may go now), else
        the Deleting status: the reconciler removes the row once they are gone."""
        try:
            self.client.delete(
                *_where(application),
                organization=_org(application),
                kinds=self._prune_kinds(application.manifest),
            )
        except BackendError as error:
            raise self._fail(error) from None
        if self._vm(application):
            return self._observe_machines(application, deleting=True, gone_is_none=True)
        try:
            seen = self.client.observe(*_where(application), organization=_org(application))
        except BackendError as error:
            return Observed(
                phase=Phase.DELETING,
                reason=f"The delete is sent; its progress cannot be read: {error.reason}",
                next_step="Nothing to do: it disappears once the cluster has removed it.",
                desired_replicas=application.desired_replicas,
            )
        if seen.isvc is None and not seen.pods:
            return None
        return Observed.of(status_of(application, seen.isvc, seen.pods, seen.events, True))

    def _observe_machines(
        self, application, deleting: bool | None = None, gone_is_none: bool = False
    ) -> Observed | None:
        try:
            seen = Machines(self.client).observe(
                *_where(application), organization=_org(application)
            )
        except BackendError as error:
            return Observed(
                phase=Phase.DELETING if deleting else application.phase,
                reason=f"{error.reason} (status as last seen)",
                next_step=self._next_step(error),
                endpoint=application.endpoint,
                ready_replicas=application.ready_replicas,
                desired_replicas=application.desired_replicas,
            )
        if gone_is_none and not seen.machines and not seen.instances:
            return None
        return Observed.of(machine_status_of(application, seen, deleting))

    def observe(self, application) -> Observed:
        if self._vm(application):
            return self._observe_machines(application)
        try:
            seen = self.client.observe(*_where(application), organization=_org(application))
        except BackendError as error:
            return Observed(
                phase=application.phase,
                reason=f"{error.reason} (status as last seen)",
                next_step=self._next_step(error),
                endpoint=application.endpoint,
                ready_replicas=application.ready_replicas,
                desired_replicas=application.desired_replicas,
            )
        return Observed.of(status_of(application, seen.isvc, seen.pods, seen.events))

    # -- a Canary rollout: the canary's InferenceService beside the stable one (jobs/rollouts)

    def apply_canary(self, application, revision) -> Observed:
        """Apply `revision` as the canary, <name>-canary (jobs.render.canary), beside the
        stable InferenceService, which keeps serving: the stable revision's objects are not
        touched (their track differs; spec.namespace is fixed, so both are in one namespace)."""
        try:
            objects = render_canary_for_profile(
                revision.manifest, self.profile, revision=revision.number
            )
            self.client.apply(objects)
        except RenderError as error:
            raise BackendFailed(
                f"Revision {revision.number} cannot run as a canary: {error}.",
                "Deploy it with spec.rollout.strategy Replace.",
            ) from None
        except BackendError as error:
            raise self._fail(error) from None
        return Observed(
            phase=Phase.PENDING,
            reason=f"Revision {revision.number} is applied as InferenceService "
            f"{canary_name(application.name)}; waiting for the cluster to run it.",
            desired_replicas=_awake(revision.manifest),
        )

    def observe_canary(self, application) -> Observed:
        """The canary's status, as derive_status reads the stable one's, and its ready
        replicas from its predictor Service's EndpointSlices (that Service itself when they
        cannot be read). Raises BackendFailed when the cluster does not answer: the rollout
        then waits for the next pass, it is not judged on a status nobody saw."""
        app, namespace = _where(application)
        try:
            seen = self.client.observe(
                app, namespace, organization=_org(application), track=CANARY_TRACK
            )
        except BackendError as error:
            raise self._fail(error) from None
        observed = Observed.of(status_of(application, seen.isvc, seen.pods, seen.events))
        if observed.phase != Phase.RUNNING:
            return replace(observed, replica_endpoints=())
        service = predictor_service(canary_name(app))
        try:
            endpoints = self.client.ready_endpoints(service, namespace)
        except BackendError:  # no right to list them (or a hiccup): the Service balances
            endpoints = ()
        return replace(
            observed, replica_endpoints=endpoints or (predictor_url(canary_name(app), namespace),)
        )

    def remove_canary(self, application) -> None:
        """Delete the canary's objects (the stable revision's stay)."""
        try:
            self.client.delete(
                *_where(application), organization=_org(application), track=CANARY_TRACK
            )
        except BackendError as error:
            raise self._fail(error) from None


def awaiting_endpoints(application, observed: Observed) -> Observed:
    """A model that sleeps (minReplicas 0) reads Running only once its predictor's ready
    endpoints are in its EndpointSlices: what the gateway, which held its requests while it
    woke, sends them to. Before that it is Loading."""
    if observed.phase != Phase.RUNNING or observed.replica_endpoints:
        return observed
    if FilledManifest(application.manifest).sleep_after_seconds is None:
        return observed
    return replace(
        observed,
        phase=Phase.LOADING,
        reason=(
            f"{observed.reason} Waiting for its ready endpoints in the predictor's "
            "EndpointSlices, where the gateway sends requests."
        ).strip(),
    )


def status_of(application, isvc, pods, events, deleting: bool | None = None):
    """derive_status for one application; Deleting while its phase says so (or `deleting`)."""
    return derive_status(
        isvc,
        pods,
        events,
        desired_replicas=_awake(application.manifest),
        deleting=application.phase == Phase.DELETING if deleting is None else deleting,
        gpu_resource=_gpu_resource(application.manifest),
    )


def machine_status_of(application, seen: MachineObjects, deleting=None):
    """derive_vm_status for one application in virtual machines."""
    return derive_vm_status(
        seen.machines,
        seen.instances,
        seen.pods,
        seen.events,
        machine_facts(application),
        claims=seen.claims,
        deleting=application.phase == Phase.DELETING if deleting is None else deleting,
    )


def machine_facts(application) -> MachineFacts:
    manifest = application.manifest
    model = manifest["spec"]["source"].get("model") or {}
    resources = model.get("resources") or {}
    gpu = _gpu(manifest)
    return MachineFacts(
        app=application.name,
        namespace=manifest["spec"]["namespace"],
        desired=_desired(manifest),
        nodes=resources.get("nodesPerReplica") or 1,
        gpu_count=gpu.get("countPerReplica") or 0,
        gpu_model=gpu.get("model") or "",
        gpu_device=_device(application.profile, gpu) or "",
    )


def _gpu(manifest: dict) -> dict:
    """The manifest's resources.accelerator.gpu block ({} without one)."""
    model = manifest["spec"]["source"].get("model") or {}
    return ((model.get("resources") or {}).get("accelerator") or {}).get("gpu") or {}


def _device(profile, gpu: dict) -> str | None:
    """The KubeVirt device name of the GPU model, from the profile's machine catalog."""
    kind = gpu_kind_named(profile.machine_catalog or (), gpu.get("model"))
    return kubevirt_device_name(kind) if kind else None


GPU_FIELD = "spec.source.model.resources.accelerator.gpu.model"


def _device_check(profile, manifest: dict):
    """A VirtualMachine application's GPU device against what the cluster's KubeVirt permits
    (as discovered): a refusal naming what it permits, or, when that is unknown, a warning
    saying why it was not checked. None: nothing to say."""
    if not is_virtual_machine_app(manifest):
        return None
    gpu = _gpu(manifest)
    cluster = profile.cluster
    device = _device(profile, gpu)
    if not gpu or device is None or "kubevirt" not in (cluster.addons or ()):
        return None  # no GPU, or the renderer already refused; no KubeVirt: the rules refuse
    permitted = cluster.kubevirt_devices
    if permitted is None:
        return target_answer(
            f"Whether KubeVirt on cluster {cluster.name} permits passing through {device} (the "
            f"device of GPU model {gpu.get('model')}) is unknown: the console could not read the "
            "KubeVirt CR, so this was not checked; an instance it does not permit stays "
            f"Scheduling. Grant list on {KUBEVIRT.resource} and discover the cluster again to "
            "have it checked.",
            GPU_FIELD,
            level="warning",
        )
    if device in permitted:
        return None
    listed = ", ".join(permitted) or "none"
    return target_answer(
        f"KubeVirt on cluster {cluster.name} does not permit passing through {device} (the "
        f"device of GPU model {gpu.get('model')}); it permits {listed}. Ask an admin to add "
        f"{device} to the KubeVirt CR's spec.configuration.permittedHostDevices.pciHostDevices "
        "and discover the cluster again, or pick a GPU model whose device it permits.",
        GPU_FIELD,
    )


def _gpu_resource(manifest: dict) -> str:
    gpu = _gpu(manifest)
    return f"{gpu.get('vendor', 'nvidia')}.com/gpu"


def discover(cluster) -> None:
    """Read the cluster's add-ons, queues and cache node groups into the Cluster row."""
    found = client_for(cluster).discover()
    cluster.addons = sorted(found.addons)
    cluster.queues = list(found.queues)
    cluster.cache_node_groups = dict(found.cache_node_groups)
    devices = found.kubevirt_devices
    cluster.kubevirt_devices = None if devices is None else list(devices)
    cluster.save(update_fields=["addons", "queues", "cache_node_groups", "kubevirt_devices"])


def discovered_vllm_version(cluster, namespace: str) -> str | None:
    """The vLLM version the cluster's serving runtime image names, or None (a local cluster,
    a cluster that does not answer or refuses, no vLLM runtime image)."""
    from jobs.models import Cluster

    if cluster.backend != Cluster.Backend.KUBERNETES:
        return None
    try:
        return client_for(cluster).runtime_vllm_version(namespace)
    except BackendError:
        return None


def discovery_warnings(cluster) -> list[str]:
    """What discovery found that its profiles cannot use: the GPU kinds of each profile's
    machine catalog that KubeVirt does not pass through (a virtual machine on one is refused
    at the dry run). Warnings: containers still run on them."""
    permitted = cluster.kubevirt_devices
    if "kubevirt" not in (cluster.addons or ()) or permitted is None:
        return []
    said = []
    for profile in cluster.profiles.order_by("name"):
        kinds = unpermitted_gpu_kinds(profile.machine_catalog or (), permitted)
        if not kinds:
            continue
        named = ", ".join(f"{name} ({device or 'no device name'})" for name, device in kinds)
        said.append(
            f"KubeVirt on cluster {cluster.name} does not permit the GPU kinds {named} of "
            f"profile {profile.name}'s machine catalog: a VirtualMachine application on one is "
            "refused at the dry run (containers are not affected). Add their devices to the "
            "KubeVirt CR's spec.configuration.permittedHostDevices and discover again; a kind "
            "with no device name needs kubevirtDeviceName in the catalog."
        )
    return said


def describe_addons(cluster) -> str:
    addons = ", ".join(cluster.addons) or "none"
    said = f"add-ons {addons}; queues {', '.join(cluster.queues) or 'none'}"
    if "kubevirt" in (cluster.addons or ()):
        devices = cluster.kubevirt_devices
        if devices is None:
            listed = (
                f"unknown (the KubeVirt CR could not be read: grant list on {KUBEVIRT.resource})"
            )
        else:
            listed = ", ".join(devices) or "none"
        said += f"; KubeVirt devices {listed}"
    return said
