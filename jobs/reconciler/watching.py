"""Following one Kubernetes cluster: watches on ServeDeck's InferenceServices, their pods, the
EndpointSlices (the ready replicas the gateway routes across) and the events of each namespace
the cluster's profiles use keep a copy of those objects and mark the applications they are
about as dirty; `drain` derives each dirty application's status from
the copy (no API call) and records it.

Each watch is namespaced (the console's rights are Roles in the profiles' namespaces, as the
README documents): one stream per (kind, namespace). A stream resumes from the last
resourceVersion it saw, lists again on 410 Gone (replacing its part of the copy, and marking
every application, since changes may have been missed), and backs off while the API server
cannot be reached. A refused or failing watch is kept on the Cluster row (`watch_error`, shown
on the clusters page, naming the rule to grant) and retried slowly. Pods are indexed by their
application label and events by the object they are about, so an application reads only its
own. Tests call `relist`, `watch_round`, `follow_step` and `drain` directly.

A Canary rollout's canary (its pods carry the application's label and servedeck.io/track) is not
the application's status: its pods are not indexed, and the events about its objects are left
out (jobs.rollouts observes the canary itself, through the backend's observe_canary).
"""

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from django.db import close_old_connections, transaction
from django.utils import timezone

from jobs.backends.base import Observed
from jobs.backends.kubernetes.backend import (
    awaiting_endpoints,
    client_for,
    machine_status_of,
    status_of,
)
from jobs.backends.kubernetes.errors import BackendError, Gone, Unreachable
from jobs.backends.kubernetes.kubevirt_client import MachineObjects, is_virtual_machine_app
from jobs.backends.kubernetes.owner import is_ours
from jobs.kube_names import about_canary, track_of
from jobs.lifecycle import record_deleted, record_status
from jobs.models import Application, Cluster, Phase, Profile
from jobs.render import APP_LABEL
from jobs.status.endpoints import application_of_slice, ready_endpoints

logger = logging.getLogger(__name__)

# EndpointSlices: the predictor's ready pods, which the gateway routes across.
KINDS = ("inference_services", "pods", "events", "endpoint_slices")
# Followed too where the cluster has KubeVirt: applications in virtual machines (and their
# weight volumes, which a replica may wait for).
VM_KINDS = ("virtual_machines", "virtual_machine_instances", "persistent_volume_claims")
Stream = tuple[str, str]  # (kind, namespace)
Key = tuple[str, str]  # (namespace, name)


class ClusterFollower:
    def __init__(
        self,
        cluster,
        *,
        watch_timeout: int = 60,
        max_backoff: float = 30.0,
        refused_backoff: float = 300.0,
        acting: Callable[[], bool] = lambda: True,
    ):
        self.cluster = cluster
        # Whether its reconciler may act (leads, when several run): checked before recording.
        self.acting = acting
        self.client = client_for(cluster)
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        # A refused watch does not heal by itself: retried slowly, its message kept meanwhile.
        self.refused_backoff = refused_backoff
        self.versions: dict[Stream, str | None] = {}
        self.backoffs: dict[Stream, float] = {}
        self.errors: dict[Stream, str] = {}
        self.dirty: set[Key] = set()
        self.known: dict[str, set[str]] = {}  # namespace -> application names on this cluster
        self.namespaces: set[str] = set()
        # The cluster's objects as the watches last told: kind -> (namespace, name) -> object,
        # and the indexes: (namespace, application or involved object's name) -> object keys.
        self.kinds = KINDS + (VM_KINDS if "kubevirt" in (cluster.addons or ()) else ())
        self.seen: dict[str, dict[Key, dict]] = {kind: {} for kind in KINDS + VM_KINDS}
        self.index: dict[str, dict[Key, set[Key]]] = {kind: {} for kind in KINDS + VM_KINDS}
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.streams: dict[Stream, threading.Event] = {}  # running streams and their stop
        self.drainer: threading.Thread | None = None  # the thread that records (start)
        self.listed: set[Stream] = set()  # streams listed at least once
        self.counts: Counter = Counter()

    # --- what changed ---------------------------------------------------------------------
    def _applications(self):
        return Application.objects.filter(profile__cluster=self.cluster).select_related(
            "profile__cluster", "organization"
        )

    def wanted_namespaces(self) -> set[str]:
        """The namespaces of the cluster's profiles (their extra namespaces too) and of its
        applications."""
        wanted: set[str] = set()
        for namespace, extra in Profile.objects.filter(cluster=self.cluster).values_list(
            "namespace", "extra_namespaces"
        ):
            wanted.add(namespace)
            wanted.update(n for n in extra or [] if isinstance(n, str) and n)
        with self.lock:
            wanted.update(self.known)
        return wanted

    def refresh_known(self) -> None:
        known: dict[str, set[str]] = {}
        for name, manifest in self._applications().values_list("name", "manifest"):
            known.setdefault(manifest["spec"]["namespace"], set()).add(name)
        with self.lock:
            self.known = known
        self.namespaces = self.wanted_namespaces()

    def application_of(self, kind: str, obj: dict) -> Key | None:
        meta = obj.get("metadata") or {}
        if kind == "endpoint_slices":
            app = application_of_slice(obj)
            return (meta.get("namespace") or "", app) if app else None
        if kind != "events":
            app = (meta.get("labels") or {}).get(APP_LABEL)
            return (meta.get("namespace") or "", app) if app else None
        # Events carry no labels: they name the object they are about, named after the app.
        namespace, name = _involved(obj)
        with self.lock:
            apps = self.known.get(namespace, set())
        for candidate in _name_prefixes(name):
            if candidate in apps:
                return namespace, candidate
        return None

    def mark(self, key: Key) -> None:
        with self.lock:
            self.dirty.add(key)
        self.wakeup.set()

    def mark_all(self) -> None:
        with self.lock:
            for namespace, apps in self.known.items():
                self.dirty.update((namespace, app) for app in apps)
        self.wakeup.set()

    # --- the copy and its indexes ---------------------------------------------------------
    def _put(self, kind: str, key: Key, obj: dict | None) -> None:
        """Store (obj) or drop (None) one object, keeping the index true. Under self.lock."""
        old = self.seen[kind].pop(key, None)
        if old is not None:
            for entry in _index_entries(kind, old):
                keys = self.index[kind].get(entry)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.index[kind][entry]
        if obj is None:
            return
        self.seen[kind][key] = obj
        for entry in _index_entries(kind, obj):
            self.index[kind].setdefault(entry, set()).add(key)

    def _forget_namespace(self, kind: str, namespace: str) -> None:
        with self.lock:
            for key in [k for k in self.seen[kind] if k[0] == namespace]:
                self._put(kind, key, None)

    def remember(self, kind: str, event_type: str, obj: dict) -> None:
        with self.lock:
            self._put(kind, _key(obj), None if event_type == "DELETED" else obj)

    def objects_of(
        self, namespace: str, app: str, organization: str
    ) -> tuple[dict | None, list, list]:
        """The InferenceService, pods and the events about them of one application, from the
        copy; objects of the same name that another organisation's application owns are not
        its."""
        with self.lock:
            isvc = self.seen["inference_services"].get((namespace, app))
            if isvc is not None and not is_ours(isvc, app, organization):
                isvc = None
            pods = [
                pod
                for key in self.index["pods"].get((namespace, app), ())
                if is_ours(pod := self.seen["pods"][key], app, organization)
            ]
            keys = set(self.index["events"].get((namespace, app), ()))
            for pod in pods:
                keys |= self.index["events"].get((namespace, _key(pod)[1]), set())
            events = [
                event
                for key in sorted(keys)
                if not about_canary(_involved(event := self.seen["events"][key])[1], app)
            ]
        return isvc, pods, events

    # --- watching -------------------------------------------------------------------------
    def _namespaces(self, namespace: str | None) -> list[str]:
        if namespace is not None:
            return [namespace]
        if not self.namespaces:
            self.refresh_known()
        return sorted(self.namespaces)

    def relist(self, kind: str, namespace: str | None = None) -> None:
        """List again (first start, after 410): every application may have changed meanwhile.
        Without a namespace, each namespace the cluster's profiles use."""
        self.refresh_known()
        for ns in self._namespaces(namespace):
            listing = getattr(self.client, f"list_{kind}")(ns)
            with self.lock:
                for key in [k for k in self.seen[kind] if k[0] == ns]:
                    self._put(kind, key, None)
                for obj in listing.items:
                    self._put(kind, _key(obj), obj)
            self.versions[(kind, ns)] = listing.resource_version
            self.listed.add((kind, ns))
        self.mark_all()

    def watch_round(self, kind: str, namespace: str | None = None) -> int:
        """One watch call per namespace, from the last version seen, until the server ends it."""
        handled = 0
        for ns in self._namespaces(namespace):
            handled += self._watch_round(kind, ns)
        return handled

    def _watch_round(self, kind: str, namespace: str) -> int:
        stream = (kind, namespace)
        if self.versions.get(stream) is None:
            self.relist(kind, namespace)
        handled = 0
        watch = getattr(self.client, f"watch_{kind}")
        stop = self.streams.get(stream, self.stopping)
        for event in watch(
            namespace, resource_version=self.versions[stream], timeout_seconds=self.watch_timeout
        ):
            if event.resource_version:
                self.versions[stream] = event.resource_version
            if event.type == "BOOKMARK":
                continue
            self.remember(kind, event.type, event.object)
            if kind in ("inference_services", "virtual_machines") and event.type == "ADDED":
                self.refresh_known()
            key = self.application_of(kind, event.object)
            if key is not None:
                self.mark(key)
            handled += 1
            self.counts[kind] += 1
            if stop.is_set() or self.stopping.is_set():
                break
        return handled

    def follow_step(self, kind: str, namespace: str) -> float:
        """One watch round of a stream and how long to wait before the next: 0 after a round
        that ended normally or a 410 (list again), growing back-offs after failures. A failure
        is recorded on the Cluster row; a round that works clears it."""
        stream = (kind, namespace)
        try:
            self._watch_round(kind, namespace)
        except Gone:
            logger.info("%s: %s watch in %s expired; listing again", self.cluster, kind, namespace)
            self.versions[stream] = None
            return 0.0
        except BackendError as error:
            self.versions[stream] = None
            refused = error.status in (401, 403)
            limit = self.refused_backoff if refused else self.max_backoff
            backoff = min(self.backoffs.get(stream, 0.5) * 2, limit)
            if refused:  # it will not heal by itself: wait long, from the first refusal
                backoff = max(backoff, min(self.max_backoff, limit))
            self.backoffs[stream] = backoff
            self._failed(stream, error, backoff, unreachable=isinstance(error, Unreachable))
            return backoff
        self.backoffs.pop(stream, None)
        self._succeeded(stream)
        return 0.0

    def _failed(self, stream: Stream, error: BackendError, backoff: float, unreachable: bool):
        kind, namespace = stream
        said = f"{error.reason}. {error.next_step}".replace("..", ".")
        if self.errors.get(stream) != said:  # said once per change, not at every retry
            log = logger.info if unreachable else logger.warning
            log("%s: %s watch in %s failed (retrying every %.0f s at most): %s",
                self.cluster, kind, namespace, backoff, error.reason)  # fmt: skip
        self.errors[stream] = said
        self._save_error()

    def _succeeded(self, stream: Stream) -> None:
        # An error saved by an earlier follower (before a restart) goes too.
        if self.errors.pop(stream, None) is not None or self.cluster.watch_error:
            self._save_error()

    def _save_error(self) -> None:
        """The cluster's watch error: the first failing stream's, in a stable order."""
        said = self.errors[min(self.errors)] if self.errors else ""
        if said == self.cluster.watch_error:
            return
        self.cluster.watch_error = said
        self.cluster.watch_error_at = timezone.now() if said else None
        Cluster.objects.filter(pk=self.cluster.pk).update(
            watch_error=said, watch_error_at=self.cluster.watch_error_at
        )

    def follow(self, kind: str, namespace: str) -> None:
        """follow_step until the stream or the follower is stopped."""
        stop = self.streams.get((kind, namespace), self.stopping)
        while not (stop.is_set() or self.stopping.is_set()):
            try:
                wait = self.follow_step(kind, namespace)
            except Exception:  # the database restarting must not end the stream for good
                logger.exception("%s: %s watch in %s failed", self.cluster, kind, namespace)
                self.versions[(kind, namespace)] = None
                wait = self.max_backoff
            if wait:
                stop.wait(wait)

    # --- recording ------------------------------------------------------------------------
    def drain(self) -> int:
        """Observe each dirty application once; return how many statuses changed. A Deleting
        application whose objects are gone from the cluster is removed."""
        if not self.acting() or not self._synced():
            # Another reconciler leads now (it records, not this one); or a part of the copy
            # is missing, and statuses would be wrong: the dirty stay for the next wake-up
            # (the list that completes the copy marks every application).
            self.wakeup.clear()
            return 0
        with self.lock:
            keys, self.dirty = self.dirty, set()
        self.wakeup.clear()
        changed = 0
        names = {name for _, name in keys}
        # One transaction for the pass: a thousand statuses are one commit, not two thousand.
        with transaction.atomic():
            for application in self._applications().filter(name__in=names):
                namespace = application.manifest["spec"]["namespace"]
                if (namespace, application.name) not in keys:
                    continue
                isvc, pods, events = self.objects_of(
                    namespace, application.name, application.organization.slug
                )
                if is_virtual_machine_app(application.manifest):
                    changed += self._drain_machines(application, namespace, pods, events)
                    continue
                if application.phase == Phase.DELETING and self._gone(namespace, isvc, pods):
                    record_deleted(application)
                    changed += 1
                    continue
                status = status_of(application, isvc, pods, events)
                endpoints = self.endpoints_of(namespace, application.name) if isvc else ()
                observed = replace(Observed.of(status), replica_endpoints=endpoints)
                if self.sees_endpoints(namespace):  # else Running goes by the pods alone
                    observed = awaiting_endpoints(application, observed)
                changed += record_status(application, observed)
        self.counts["drained"] += len(keys)
        return changed

    def _synced(self) -> bool:
        """Whether every running stream has listed once (or failed, and says so on the
        cluster's row): a follower that starts, on a reconciler's start or a new leader's,
        records nothing from an InferenceService whose pods are not listed yet."""
        streams = self.streams.copy()  # one C call: safe beside sync_streams' changes
        return all(s in self.listed or s in self.errors for s in streams)

    def sees_endpoints(self, namespace: str) -> bool:
        """Whether the namespace's EndpointSlices are in the copy (their watch listed, not
        refused): a model that sleeps waits for its endpoints only then."""
        stream = ("endpoint_slices", namespace)
        return stream in self.listed and stream not in self.errors

    def endpoints_of(self, namespace: str, app: str) -> tuple[str, ...]:
        """The ready endpoints of the application's predictor Service, from the copy."""
        with self.lock:
            slices = [
                self.seen["endpoint_slices"][key]
                for key in self.index["endpoint_slices"].get((namespace, app), ())
            ]
        return ready_endpoints(slices)

    def machines_of(self, namespace: str, app: str, organization: str) -> tuple[list, ...]:
        """The VirtualMachines, instances and weight volumes of one application, from the
        copy."""
        with self.lock:
            return tuple(  # type: ignore[return-value]
                [
                    obj
                    for key in self.index[kind].get((namespace, app), ())
                    if is_ours(obj := self.seen[kind][key], app, organization)
                ]
                for kind in VM_KINDS
            )

    def _drain_machines(self, application, namespace: str, pods: list, events: list) -> int:
        """As drain does for containers, for an application in virtual machines."""
        vms, vmis, claims = self.machines_of(
            namespace, application.name, application.organization.slug
        )
        # Without KubeVirt (not followed) there are no machines to wait for.
        followed = [kind for kind in VM_KINDS[:2] if kind in self.kinds]
        listed = all(self.versions.get((kind, namespace)) for kind in followed)
        if application.phase == Phase.DELETING and listed and not vms and not vmis:
            record_deleted(application)
            return 1
        seen = MachineObjects(vms, vmis, pods, events, claims)
        return record_status(application, Observed.of(machine_status_of(application, seen)))

    def _gone(self, namespace: str, isvc: dict | None, pods: list) -> bool:
        """Nothing of the application left, as far as lists of both kinds have told."""
        listed = all(self.versions.get((kind, namespace)) for kind in KINDS[:2])
        return listed and isvc is None and not pods

    def keep_draining(self) -> None:
        while not self.stopping.is_set():
            self.wakeup.wait(1.0)
            close_old_connections()
            try:
                self.drain()
            except Exception:  # the database or the cluster hiccuped: the next wake-up retries
                logger.exception("%s: recording statuses failed", self.cluster.name)

    def sync_streams(self) -> list[threading.Thread]:
        """A stream for each kind in each namespace in use; the streams of namespaces no longer
        used are stopped and their objects forgotten. Returns the threads it started."""
        self.refresh_known()
        wanted = {(kind, ns) for kind in self.kinds for ns in self.namespaces}
        for stream in [s for s in self.streams if s not in wanted]:
            self.streams.pop(stream).set()
            self.versions.pop(stream, None)
            self._forget_namespace(*stream)
            self._succeeded(stream)
        started = []
        for stream in sorted(wanted - set(self.streams)):
            self.streams[stream] = threading.Event()
            started.append(
                threading.Thread(target=self._in_thread, args=(self.follow, *stream), daemon=True)
            )
            started[-1].start()
        return started

    def start(self) -> list[threading.Thread]:
        """The drain thread and a thread per stream; returns them (for a caller to join)."""
        drainer = threading.Thread(target=self._in_thread, args=(self.keep_draining,), daemon=True)
        self.drainer = drainer
        drainer.start()
        return [drainer, *self.sync_streams()]

    def _in_thread(self, target, *args) -> None:
        from django.db import connection

        try:
            target(*args)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopping.set()
        for stop in self.streams.values():
            stop.set()
        self.wakeup.set()


def _key(obj: dict) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _involved(event: dict) -> Key:
    meta = event.get("metadata") or {}
    about = event.get("involvedObject") or event.get("regarding") or {}
    return (about.get("namespace") or meta.get("namespace") or "", about.get("name") or "")


def _name_prefixes(name: str) -> list[str]:
    """The names an object named `name` may be about: itself and each dash-prefix, with and
    without Kueue's "pod-" (llama-predictor-5d8f -> llama-predictor-5d8f, llama-predictor,
    llama)."""
    names = [name]
    if name.startswith("pod-"):
        names.append(name[4:])
    found: list[str] = []
    for each in names:
        parts = each.split("-")
        found += ["-".join(parts[:n]) for n in range(len(parts), 0, -1)]
    return [n for n in dict.fromkeys(found) if n]


def _index_entries(kind: str, obj: dict) -> list[Key]:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    if kind == "pods" or kind in VM_KINDS:
        app = (meta.get("labels") or {}).get(APP_LABEL)
        if kind == "pods" and track_of(obj):  # a canary's: not the application's status
            return []
        return [(namespace, app)] if app else []
    if kind == "endpoint_slices":
        app = application_of_slice(obj)
        return [(namespace, app)] if app else []
    if kind == "events":
        involved_namespace, name = _involved(obj)
        return [(involved_namespace, n) for n in _name_prefixes(name)]
    return []
