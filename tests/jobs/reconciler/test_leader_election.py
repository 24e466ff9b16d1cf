"""Leader election on a Lease (jobs/reconciler/leader.py) against the Kubernetes emulator: one
candidate of two leads; a write from a stale read loses; a leader cut off from the API server
stops acting before the other may take the Lease; a leader that stops gives the Lease up; and
two real reconcilers (threads, real time): one acts, the leader is killed, the other takes
over within the lease, and no status is recorded by both. On the embedded defaults no
election runs."""

from __future__ import annotations

import threading

import pytest

from jobs import deploy as verbs
from jobs.backends.kubernetes.kube_api import ClusterConnection, KubeApi
from jobs.models import Event
from jobs.reconciler import Reconciler, leader, watching
from jobs.reconciler.leader import LeaderElector, LeaseTimes
from tests.fakes.kube_objects import (
    PROD_NAMESPACE,
    predictor_pod,
    with_status,
)
from tests.helpers import SHORTEST, wait_for

NAMESPACE = "servedeck"
TIMES = LeaseTimes(duration=15, renew_deadline=10, retry_period=2)


class Clock:
    """A monotonic clock the test moves: no test here waits for real seconds to pass."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def connection(kube, context: str = "emulator") -> ClusterConnection:
    return ClusterConnection(
        "prod", str(kube.kubeconfig_path), context, kubeconfig_dir=str(kube.directory)
    )


def candidate(kube, name: str, clock=None, times: LeaseTimes = TIMES) -> LeaderElector:
    options = {"clock": clock} if clock is not None else {}
    return LeaderElector(connection(kube), NAMESPACE, candidate=name, times=times, **options)


def lease(kube) -> dict:
    return kube.get("Lease", leader.DEFAULT_LEASE_NAME, NAMESPACE)["spec"]


def test_one_candidate_of_two_leads(kube):
    clock = Clock()
    a, b = candidate(kube, "a", clock), candidate(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.leading() and not b.leading()
    spec = lease(kube)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    clock.advance(2)
    assert a.try_acquire_or_renew()  # renewed: same holder, a newer renewTime
    assert lease(kube)["renewTime"] >= spec["renewTime"]
    assert lease(kube)["acquireTime"] == spec["acquireTime"]


def test_a_write_from_a_stale_read_loses(kube):
    """Two candidates that read the same record cannot both write it: the second write's
    resourceVersion is stale, and the API server answers 409."""
    clock = Clock()
    a, b = candidate(kube, "a", clock), candidate(kube, "b", clock)
    assert a.try_acquire_or_renew()
    stale = kube.get("Lease", leader.DEFAULT_LEASE_NAME, NAMESPACE)
    assert a.try_acquire_or_renew()  # the record moves on
    assert not b._replace(stale, {**stale["spec"], "holderIdentity": "b"})
    assert lease(kube)["holderIdentity"] == "a"


def test_a_leader_cut_off_stops_acting_before_another_may_take_over(kube):
    clock = Clock()
    a, b = candidate(kube, "a", clock), candidate(kube, "b", clock)
    assert a.try_acquire_or_renew()
    renewed_at = clock()
    assert not b.try_acquire_or_renew()
    # The leader loses the API server: its renewals fail from now on.
    a.api = KubeApi(connection(kube, "unreachable"), 0.5, 0.5)
    both = []
    stopped_at = taken_at = None
    for _ in range(40):  # 40 retry periods of the candidates' loops, in the test's time
        clock.advance(TIMES.retry_period / 2)
        a.try_acquire_or_renew()
        if b.try_acquire_or_renew() and taken_at is None:
            taken_at = clock()
        if not a.leading() and stopped_at is None:
            stopped_at = clock()
        both.append(a.leading() and b.leading())
    assert stopped_at is not None and taken_at is not None
    assert not any(both)
    assert stopped_at < taken_at  # it stopped acting first
    assert taken_at - stopped_at >= TIMES.duration - TIMES.renew_deadline - TIMES.retry_period
    # Replaced within the lease: once it has run out, at the candidate's next try.
    assert TIMES.duration < taken_at - renewed_at <= TIMES.duration + TIMES.retry_period
    spec = lease(kube)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


def test_a_lease_taken_by_another_stops_the_leader_at_its_next_renewal(kube):
    clock = Clock()
    a = candidate(kube, "a", clock)
    assert a.try_acquire_or_renew()
    live = kube.get("Lease", leader.DEFAULT_LEASE_NAME, NAMESPACE)
    live["spec"]["holderIdentity"] = "someone-else"  # an operator's hand, or a bug elsewhere
    kube.put(live)
    stopping = threading.Event()
    stopped = threading.Event()
    a.on_stopped = stopped.set
    a._renewed_at = clock()  # as after its last renewal
    a.times = LeaseTimes(duration=1.5, renew_deadline=1.0, retry_period=0.05)
    thread = threading.Thread(target=a._renew, args=(stopping,))
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the leader went on renewing a Lease it no longer holds"
    assert a.holder() == "someone-else"
    stopping.set()


def test_a_leader_that_stops_gives_the_lease_up(kube):
    clock = Clock()
    a, b = candidate(kube, "a", clock), candidate(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.leading()
    assert lease(kube)["holderIdentity"] == ""
    assert b.try_acquire_or_renew()  # at once: no need to wait for the lease to run out


def test_the_lease_times_keep_their_order():
    assert LeaseTimes.for_duration(15) == LeaseTimes(15, 10, 2)
    with pytest.raises(ValueError, match="duration > renew deadline"):
        LeaseTimes(duration=10, renew_deadline=10, retry_period=2)


def test_on_the_embedded_defaults_no_election_runs(settings):
    assert settings.SERVEDECK_LEADER_ELECTION_NAMESPACE == ""
    assert leader.from_settings() is None
    assert Reconciler().acting()


@pytest.mark.parametrize("seconds", ["2", "soon"])
def test_a_lease_too_short_or_not_a_number_stops_start_up(tmp_path, seconds):
    import os
    import subprocess
    import sys

    from tests.deploy.manifests import REPO

    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(SERVEDECK_VAR_DIR=str(tmp_path), SERVEDECK_LEADER_ELECTION_LEASE_SECONDS=seconds)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "SERVEDECK_LEADER_ELECTION_LEASE_SECONDS" in done.stderr.splitlines()[-1]


def test_in_a_cluster_the_election_uses_the_pods_own_account(settings):
    settings.SERVEDECK_LEADER_ELECTION_NAMESPACE = "servedeck"
    settings.SERVEDECK_LEADER_ELECTION_LEASE_SECONDS = 30
    elector = leader.from_settings()
    assert elector.api.connection.in_cluster
    assert (elector.namespace, elector.name) == ("servedeck", "servedeck-reconciler")
    assert elector.times == LeaseTimes(30, 20, 4)
    assert not elector.leading()  # nothing asked yet


# --- two reconcilers ------------------------------------------------------------------------

MANIFEST = SHORTEST.replace("profileName: local", "profileName: prod")
# Short, for a quick test, yet long enough that a busy machine renews in time.
FAST = LeaseTimes(duration=6.0, renew_deadline=4.0, retry_period=0.3)


@pytest.fixture
def recorded(monkeypatch):
    """Every status the followers record: (thread, application, phase), in order."""
    calls: list[tuple[threading.Thread, str, str]] = []
    lock = threading.Lock()
    real = watching.record_status

    def record(application, observed):
        with lock:
            calls.append((threading.current_thread(), application.name, observed.phase))
        return real(application, observed)

    monkeypatch.setattr(watching, "record_status", record)
    return calls


class Replica:
    """One `manage.py reconcile` replica in a thread: its elector, and a kill that ends it
    without giving the Lease up, as a lost node does."""

    def __init__(self, kube, name: str) -> None:
        elector = LeaderElector(connection(kube), NAMESPACE, candidate=name, times=FAST)
        self.reconciler = Reconciler(interval=0.2, leader=elector)
        self.elector = elector
        self.thread = threading.Thread(target=self.reconciler.run, name=name)

    def start(self) -> Replica:
        self.thread.start()
        return self

    def kill(self) -> None:
        self.elector.release_on_stop = False
        self.stop()

    def stop(self) -> None:
        self.reconciler.stop()
        self.thread.join(15)
        assert not self.thread.is_alive()

    def recorded(self, calls) -> list[tuple[str, str]]:
        mine = set(self.reconciler.drainers)
        return [(app, phase) for thread, app, phase in calls if thread in mine]


@pytest.mark.database_file  # the reconcilers' threads write beside this one
def test_two_reconcilers_one_acts_and_the_other_takes_over(
    prod, deployer, kube, transactional_db, recorded
):
    app = verbs.apply(MANIFEST, deployer).application
    replicas = [Replica(kube, "reconciler-0").start(), Replica(kube, "reconciler-1").start()]
    try:
        first = wait_for(
            lambda: next((r for r in replicas if r.elector.leading()), None),
            "no reconciler took the Lease",
            timeout=30,
        )
        other = next(r for r in replicas if r is not first)
        kube.put(with_status(kube.get("InferenceService", "bge-embed", PROD_NAMESPACE)))
        kube.put(predictor_pod("bge-embed", PROD_NAMESPACE))
        wait_for(lambda: phase_of(app) == "Running", "the leader did not record Running", 30)
        assert not other.elector.leading()
        assert other.reconciler.followers == {}  # it follows nothing while it does not lead

        first.kill()  # the node is gone: no release, the Lease runs out
        killed_holder = lease(kube)
        assert killed_holder["holderIdentity"] == first.elector.identity
        wait_for(other.elector.leading, "the other did not take over", timeout=60)
        assert lease(kube)["holderIdentity"] == other.elector.identity
        assert lease(kube)["leaseTransitions"] == killed_holder["leaseTransitions"] + 1

        # The new leader follows the cluster: the replica's OOM is recorded, by it.
        kube.put(predictor_pod("bge-embed", PROD_NAMESPACE, ready=False, oom=True))
        wait_for(lambda: phase_of(app) == "Failed", "the new leader did not record Failed", 30)
    finally:
        for replica in replicas:
            if replica.thread.is_alive():
                replica.stop()
    by_first, by_other = first.recorded(recorded), other.recorded(recorded)
    assert ("bge-embed", "Running") in by_first and ("bge-embed", "Failed") in by_other
    # No status recorded by both: each change's record came from one replica, and the first
    # recorded nothing after the second took over.
    assert [phase for _, phase in by_first].count("Running") >= 1
    assert "Failed" not in [phase for _, phase in by_first]
    owners = [thread for thread, _, _ in recorded]
    last_first = max(i for i, t in enumerate(owners) if t in set(first.reconciler.drainers))
    first_other = min(i for i, t in enumerate(owners) if t in set(other.reconciler.drainers))
    assert last_first < first_other
    transitions = Event.objects.filter(application=app).values_list("reason", flat=True)
    assert list(transitions).count("Running") == 1
    assert list(transitions).count("Failed") == 1


def phase_of(app) -> str:
    app.refresh_from_db()
    return app.phase
