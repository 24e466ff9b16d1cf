"""Following one Kubernetes cluster: watches on ServeDeck's InferenceServices, their pods and
the namespace events keep a copy of those objects and mark the applications they are about as
dirty; `drain` derives each dirty application's status from the copy (no API call) and records
it.

A watch resumes from the last resourceVersion it saw, lists again on 410 Gone (replacing the
copy, and marking every application, since changes may have been missed), and backs off while
the API server cannot be reached. Tests call `relist`, `watch_round` and `drain` directly.
"""

import logging
import threading
from collections import Counter

from django.db import close_old_connections, transaction

from jobs.backends.cluster import client_for, status_of
from jobs.backends.k8s_errors import BackendError, Gone, Unreachable
from jobs.backends.k8s_owner import is_ours
from jobs.lifecycle import Observed, record_status
from jobs.models import Application, Phase
from jobs.render import APP_LABEL

logger = logging.getLogger(__name__)

KINDS = ("inference_services", "pods", "events")


class ClusterFollower:
    def __init__(self, cluster, *, watch_timeout: int = 60, max_backoff: float = 30.0):
        self.cluster = cluster
        self.client = client_for(cluster)
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.versions: dict[str, str | None] = dict.fromkeys(KINDS)
        self.dirty: set[tuple[str, str]] = set()
        self.known: dict[str, set[str]] = {}  # namespace -> application names on this cluster
        # The cluster's objects as the watches last told: kind -> (namespace, name) -> object.
        self.seen: dict[str, dict[tuple[str, str], dict]] = {kind: {} for kind in KINDS}
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.counts: Counter = Counter()

    # --- what changed ---------------------------------------------------------------------
    def _applications(self):
        return Application.objects.filter(profile__cluster=self.cluster).select_related(
            "profile__cluster", "organization"
        )

    def refresh_known(self) -> None:
        known: dict[str, set[str]] = {}
        for name, manifest in self._applications().values_list("name", "manifest"):
            known.setdefault(manifest["spec"]["namespace"], set()).add(name)
        with self.lock:
            self.known = known

    def application_of(self, kind: str, obj: dict) -> tuple[str, str] | None:
        meta = obj.get("metadata") or {}
        if kind != "events":
            app = (meta.get("labels") or {}).get(APP_LABEL)
            return (meta.get("namespace") or "", app) if app else None
        # Events carry no labels: they name the object they are about.
        involved = obj.get("involvedObject") or {}
        namespace, name = involved.get("namespace") or meta.get("namespace"), involved.get("name")
        with self.lock:
            apps = self.known.get(namespace, set())
        for app in apps:
            if name == app or (name or "").startswith(f"{app}-"):
                return namespace, app
        return None

    def mark(self, key: tuple[str, str]) -> None:
        with self.lock:
            self.dirty.add(key)
        self.wakeup.set()

    def mark_all(self) -> None:
        with self.lock:
            for namespace, apps in self.known.items():
                self.dirty.update((namespace, app) for app in apps)
        self.wakeup.set()

    # --- watching -------------------------------------------------------------------------
    def relist(self, kind: str) -> None:
        """List again (first start, after 410): every application may have changed meanwhile."""
        self.refresh_known()
        listing = getattr(self.client, f"list_{kind}")()
        with self.lock:
            self.seen[kind] = {_key(obj): obj for obj in listing.items}
        self.versions[kind] = listing.resource_version
        self.mark_all()

    def remember(self, kind: str, event_type: str, obj: dict) -> None:
        with self.lock:
            if event_type == "DELETED":
                self.seen[kind].pop(_key(obj), None)
            else:
                self.seen[kind][_key(obj)] = obj

    def objects_of(
        self, namespace: str, app: str, organization: str
    ) -> tuple[dict | None, list, list]:
        """The InferenceService, pods and namespace events of one application, from the copy;
        objects of the same name that another organisation's application owns are not its."""
        with self.lock:
            isvc = self.seen["inference_services"].get((namespace, app))
            if isvc is not None and not is_ours(isvc, app, organization):
                isvc = None
            pods = [
                pod
                for (ns, _), pod in self.seen["pods"].items()
                if ns == namespace and is_ours(pod, app, organization)
            ]
            events = [e for (ns, _), e in self.seen["events"].items() if ns == namespace]
        return isvc, pods, events

    def watch_round(self, kind: str) -> int:
        """One watch call, from the last version seen, until the server ends it."""
        if self.versions[kind] is None:
            self.relist(kind)
        handled = 0
        watch = getattr(self.client, f"watch_{kind}")
        for event in watch(
            resource_version=self.versions[kind], timeout_seconds=self.watch_timeout
        ):
            if event.resource_version:
                self.versions[kind] = event.resource_version
            if event.type == "BOOKMARK":
                continue
            self.remember(kind, event.type, event.object)
            if kind == "inference_services" and event.type == "ADDED":
                self.refresh_known()
            key = self.application_of(kind, event.object)
            if key is not None:
                self.mark(key)
            handled += 1
            self.counts[kind] += 1
            if self.stopping.is_set():
                break
        return handled

    def follow(self, kind: str) -> None:
        """watch_round until stopped; list again on 410, back off while unreachable."""
        backoff = 1.0
        while not self.stopping.is_set():
            try:
                self.watch_round(kind)
                backoff = 1.0
            except Gone:
                logger.info("%s: %s watch expired; listing again", self.cluster.name, kind)
                self.versions[kind] = None
            except Unreachable as error:
                logger.warning("%s: %s; retrying in %.0f s", self.cluster.name, error, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                self.versions[kind] = None
            except BackendError as error:
                logger.warning("%s: %s watch failed: %s", self.cluster.name, kind, error)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    # --- recording ------------------------------------------------------------------------
    def drain(self) -> int:
        """Observe each dirty application once; return how many statuses changed."""
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
                if application.phase == Phase.DELETING:
                    continue
                seen = self.objects_of(namespace, application.name, application.organization.slug)
                status = status_of(application, *seen)
                changed += record_status(application, Observed.of(status))
        self.counts["drained"] += len(keys)
        return changed

    def keep_draining(self) -> None:
        while not self.stopping.is_set():
            self.wakeup.wait(1.0)
            close_old_connections()
            try:
                self.drain()
            except Exception:  # the database or the cluster hiccuped: the next wake-up retries
                logger.exception("%s: recording statuses failed", self.cluster.name)

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._in_thread, args=(self.follow, kind), daemon=True)
            for kind in KINDS
        ]
        threads.append(
            threading.Thread(target=self._in_thread, args=(self.keep_draining,), daemon=True)
        )
        for thread in threads:
            thread.start()
        return threads

    def _in_thread(self, target, *args) -> None:
        from django.db import connection

        try:
            target(*args)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopping.set()
        self.wakeup.set()


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""
