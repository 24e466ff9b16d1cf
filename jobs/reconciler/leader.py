"""Leader election on a coordination.k8s.io Lease, so that of several `manage.py reconcile`
replicas exactly one acts (settings.SERVEDECK_LEADER_ELECTION_NAMESPACE; off on the embedded
defaults, where one reconciler runs and nothing here is used).

The algorithm is client-go's: a candidate takes the Lease when it does not exist, when it names
no holder, or when its record has not changed for a whole lease duration as this candidate saw
it (its own clock measures how long the record stayed the same, so no two clocks are
compared); every write is a replace conditional on the resourceVersion read, so two candidates
never both win. The leader renews every retry period; `leading()` turns false as soon as no
renewal has succeeded for the renew deadline, which is shorter than the lease duration: a leader
cut off from the API server stops acting before any other candidate may take the Lease. A
leader that stops cleanly gives the Lease up (holder emptied), so the next one need not wait.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobs.backends.kubernetes.errors import BackendError, Call, NotFound
from jobs.backends.kubernetes.kinds import LEASE
from jobs.backends.kubernetes.kube_api import ClusterConnection, KubeApi

logger = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "servedeck-reconciler"


@dataclass(frozen=True)
class LeaseTimes:
    """Seconds: how long a Lease holds without renewal, how long a leader keeps acting without
    one (shorter), and how often it renews (candidates try as often)."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def for_duration(cls, duration: float) -> LeaseTimes:
        """client-go's proportions (15 s, 10 s, 2 s) for another lease duration."""
        return cls(duration, duration * 2 / 3, duration * 2 / 15)

    def __post_init__(self) -> None:
        if not (self.duration > self.renew_deadline > self.retry_period > 0):
            raise ValueError(
                "A lease needs duration > renew deadline > retry period > 0; got "
                f"{self.duration}, {self.renew_deadline}, {self.retry_period}"
            )


def now_micro() -> str:
    """The time as a Lease's MicroTime fields carry it: 2026-01-01T10:00:00.123456Z."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def identity() -> str:
    """This process among the candidates: the host name (the pod's name in a cluster) and a
    random part, so a restarted process is a new candidate."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


class LeaderElector:
    """One candidate. `run(stopping)` loops until the event is set (in a thread of its own:
    `start`); `leading()` says whether this process may act now."""

    def __init__(
        self,
        connection: ClusterConnection,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        *,
        candidate: str | None = None,
        times: LeaseTimes | None = None,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = candidate or identity()
        self.times = times or LeaseTimes()
        # No call may outlast a retry period: a slow API server must not keep a leader acting
        # past its renew deadline unnoticed.
        self.api = KubeApi(connection, self.times.retry_period, self.times.retry_period)
        self.on_started = on_started or (lambda: None)
        self.on_stopped = on_stopped or (lambda: None)
        self.clock = clock
        self.release_on_stop = True
        self._observed: tuple[str, dict] | None = None  # (resourceVersion, spec) last read
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # when this candidate last wrote the Lease
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.transitions = 0  # times this candidate became the leader

    # --- what the reconciler asks -------------------------------------------------------

    def leading(self) -> bool:
        """True while the last renewal is younger than the renew deadline."""
        with self._lock:
            renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.times.renew_deadline

    def holder(self) -> str:
        """The holder named in the Lease as last read ("" when none)."""
        with self._lock:
            observed = self._observed
        return str((observed[1] if observed else {}).get("holderIdentity") or "")

    # --- one attempt --------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """Read the Lease and write it as ours if it is ours or free; True on success."""
        stamp = now_micro()
        try:
            lease = self.api.get(LEASE, self.name, self.namespace)
        except NotFound:
            return self._create(stamp)
        except BackendError as error:
            logger.info("leader election: cannot read Lease %s/%s: %s",
                        self.namespace, self.name, error.reason)  # fmt: skip
            return False
        spec = lease.get("spec") or {}
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self._observe(version, spec)
        held_by = spec.get("holderIdentity") or ""
        ours = held_by == self.identity
        if held_by and not ours and not self._expired():
            return False
        wanted = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.times.duration)),
            "acquireTime": spec.get("acquireTime") if ours else stamp,
            "renewTime": stamp,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours else 1),
        }
        return self._replace(lease, wanted)

    def _expired(self) -> bool:
        with self._lock:
            seen_at = self._observed_at
        return self.clock() - seen_at > self.times.duration

    def _observe(self, version: str, spec: dict) -> None:
        with self._lock:
            if self._observed is None or self._observed[0] != version:
                self._observed = (version, spec)
                self._observed_at = self.clock()

    def _create(self, stamp: str) -> bool:
        started = self.clock()
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.times.duration)),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        call = Call("create", LEASE, self.namespace, self.name)
        method = self.api.custom.create_namespaced_custom_object
        try:
            made = self.api.request(call, method, *self._where(), body)
        except BackendError as error:
            logger.info("leader election: cannot create Lease %s/%s: %s",
                        self.namespace, self.name, error.reason)  # fmt: skip
            return False
        return self._wrote(made, started)

    def _replace(self, lease: dict, spec: dict) -> bool:
        started = self.clock()
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            # The resourceVersion read makes the write conditional: a candidate that wrote in
            # between makes this one fail (409), so two never both win.
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": spec,
        }
        call = Call("update", LEASE, self.namespace, self.name)
        method = self.api.custom.replace_namespaced_custom_object
        try:
            written = self.api.request(call, method, *self._where(), self.name, body)
        except BackendError as error:
            logger.info("leader election: cannot write Lease %s/%s: %s",
                        self.namespace, self.name, error.reason)  # fmt: skip
            return False
        return self._wrote(written, started)

    def _wrote(self, lease: dict, started: float) -> bool:
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self._observe(version, lease.get("spec") or {})
        with self._lock:
            # From when the write was sent: the others' lease duration runs from later.
            self._renewed_at = started
        return True

    def _where(self) -> tuple[str, str, str, str]:
        return (LEASE.group, LEASE.version, self.namespace, LEASE.plural)

    # --- the loop -----------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        """Campaign, lead, and campaign again after a lost lease, until `stopping` is set."""
        while not stopping.is_set():
            if not self._acquire(stopping):
                break
            self.transitions += 1
            logger.info("leader election: %s leads (Lease %s/%s)",
                        self.identity, self.namespace, self.name)  # fmt: skip
            self.on_started()
            self._renew(stopping)
            self._stop_leading()
            if stopping.is_set():
                break
            logger.warning("leader election: %s lost the Lease %s/%s; it no longer acts",
                           self.identity, self.namespace, self.name)  # fmt: skip
        if self.release_on_stop:
            self.release()

    def _acquire(self, stopping: threading.Event) -> bool:
        while not stopping.is_set():
            if self.try_acquire_or_renew():
                return True
            # Jitter, as client-go: candidates do not all ask at once.
            stopping.wait(self.times.retry_period * (1 + random.random() * 0.2))  # noqa: S311
        return False

    def _renew(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.times.retry_period):
            renewed = self.try_acquire_or_renew()
            if not self.leading():
                return  # the renew deadline passed without a renewal
            if not renewed and self.holder() not in ("", self.identity):
                return  # another candidate holds it now

    def _stop_leading(self) -> None:
        with self._lock:
            self._renewed_at = None
        self.on_stopped()

    def release(self) -> None:
        """Give the Lease up if this candidate holds it: the next one takes it at once."""
        try:
            lease = self.api.get(LEASE, self.name, self.namespace)
        except BackendError:
            return
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now_micro())
        if self._replace(lease, spec):
            with self._lock:
                self._renewed_at = None
            logger.info("leader election: %s gave the Lease up", self.identity)

    def start(self, stopping: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(
            target=self.run, args=(stopping,), name="servedeck-leader-election", daemon=True
        )
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def from_settings(**callbacks: Any) -> LeaderElector | None:
    """The elector `manage.py reconcile` campaigns with: None unless
    SERVEDECK_LEADER_ELECTION_NAMESPACE is set (the embedded defaults, and any single
    reconciler), else one on the Lease named by SERVEDECK_LEADER_ELECTION_LEASE in that
    namespace, through the pod's own service account."""
    from django.conf import settings

    namespace = getattr(settings, "SERVEDECK_LEADER_ELECTION_NAMESPACE", "")
    if not namespace:
        return None
    connection = ClusterConnection(name="the reconciler's own cluster", in_cluster=True)
    return LeaderElector(
        connection,
        namespace,
        settings.SERVEDECK_LEADER_ELECTION_LEASE or DEFAULT_LEASE_NAME,
        times=LeaseTimes.for_duration(float(settings.SERVEDECK_LEADER_ELECTION_LEASE_SECONDS)),
        **callbacks,
    )
