"""Following one Kubernetes cluster: watches on ServeDeck's InferenceServices, their pods and
the namespace events mark applications dirty; `drain` observes each dirty application once and
records what derive_status makes of it.

A watch resumes from the last resourceVersion it saw, lists again on 410 Gone, and backs off
while the API server cannot be reached. Tests call `relist`, `watch_round` and `drain` directly.
"""

import logging
import threading
from collections import Counter

from django.db import close_old_connections

from jobs.backends.cluster import ClusterBackend, client_for
from jobs.backends.k8s_errors import BackendError, Gone, Unreachable
from jobs.lifecycle import record_status
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
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.counts: Counter = Counter()

    # --- what changed ---------------------------------------------------------------------
    def _applications(self):
        return Application.objects.filter(profile__cluster=self.cluster).select_related(
            "profile__cluster"
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
        self.versions[kind] = listing.resource_version
        self.mark_all()

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
        for namespace, name in sorted(keys):
            for application in self._applications().filter(name=name):
                if application.manifest["spec"]["namespace"] != namespace:
                    continue
                if application.phase == Phase.DELETING:
                    continue
                observed = ClusterBackend(application.profile).observe(application)
                changed += record_status(application, observed)
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
