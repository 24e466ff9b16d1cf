"""The reconciler: follows every application's cluster and keeps its status true.

Local applications are observed by polling their processes; Kubernetes clusters are followed by
watches (one thread per cluster, see jobs/reconciler/watching.py). Each change goes through
lifecycle.record_status: saved, an Event, a message to the live page.

With a leader elector (jobs/reconciler/leader.py: several replicas in a cluster) it acts only
while it leads: on losing the Lease its followers stop at once and their threads are awaited;
it campaigns on and follows again if it leads again.
"""

import logging
import threading
import time

from django.db import close_old_connections
from django.utils import timezone

from jobs.backends import backend_for
from jobs.backends.local.backend import forget_local_runner, local_runners_on_disk
from jobs.lifecycle import record_status
from jobs.live import groups
from jobs.models import Application, Cluster, Phase
from jobs.overview import serving_metrics
from jobs.reconciler import sleeping
from jobs.reconciler.scraping import SCRAPE_BUDGET_SECONDS, SCRAPE_WORKERS, ScrapePass, Scraper
from jobs.rollouts import steps as rollouts

logger = logging.getLogger(__name__)

# Kubernetes applications' metrics go through the API server: scraped less often than the local
# servers on this machine (each pass of scrapes is bounded: jobs/reconciler/scraping.py).
KUBERNETES_SCRAPE_SECONDS = 10.0


class Reconciler:
    """Step methods that tests call directly; `run` loops them until `stop` is called."""

    def __init__(
        self,
        interval: float = 2.0,
        scrape_workers: int = SCRAPE_WORKERS,
        scrape_budget: float = SCRAPE_BUDGET_SECONDS,
        leader=None,
    ):
        self.interval = interval
        self.stopping = threading.Event()
        self.leader = leader  # a LeaderElector, or None: this is the only reconciler
        self.followers: dict[int, tuple] = {}  # cluster pk -> (connection, follower)
        # Every follower's drain thread this reconciler started (the threads that record).
        self.drainers: list[threading.Thread] = []
        self._followers_lock = threading.RLock()
        self.scraped_kubernetes_at: float | None = None
        # One each, as each keeps its own applications' order: the local servers are scraped
        # every step, Kubernetes applications every KUBERNETES_SCRAPE_SECONDS.
        self.local_scraper = Scraper(scrape_workers, scrape_budget)
        self.kubernetes_scraper = Scraper(scrape_workers, scrape_budget)
        # The judge's clock (Canary rollouts' steps end by it): tests set their own.
        self.now = timezone.now

    def step_local(self) -> int:
        """Observe every application on a local profile; return how many changed."""
        changed = 0
        apps = Application.objects.filter(
            profile__cluster__backend=Cluster.Backend.LOCAL
        ).select_related("profile__cluster")
        running = []
        slept = {a.pk for a in sleeping.sleep_idle(apps)}
        for application in apps:
            # A sleeping one has no process to observe (its wake starts them: sleeping.py).
            if application.phase in (Phase.DELETING, Phase.SLEEPING) or application.pk in slept:
                continue
            try:
                observed = backend_for(application.profile).observe(application)
            except Exception:  # one application's trouble must not stop the others
                logger.exception("could not observe %s", application.name)
                continue
            changed += record_status(application, observed)
            running.append(application)
        self.scrape(running, self.local_scraper)
        rollouts.advance_all(self.now())
        return changed

    def sleep_kubernetes(self) -> list:
        """Put idle Running applications with minReplicas 0 on Kubernetes to sleep (their
        predictors scaled to zero); the watches then see them Sleeping, and the first request
        wakes them (sleeping.py). Those put to sleep."""
        apps = Application.objects.filter(
            profile__cluster__backend=Cluster.Backend.KUBERNETES, phase=Phase.RUNNING
        ).select_related("profile__cluster")
        return sleeping.sleep_idle(apps)

    def scrape_kubernetes(self) -> ScrapePass:
        """The Running applications on Kubernetes clusters: their vLLM servers' figures,
        through each cluster's API server."""
        apps = Application.objects.filter(
            profile__cluster__backend=Cluster.Backend.KUBERNETES, phase=Phase.RUNNING
        ).select_related("profile__cluster")
        return self.scrape(list(apps), self.kubernetes_scraper)

    def scrape(self, applications: list, scraper: Scraper) -> ScrapePass:
        """The Running vLLM servers' own figures (requests waiting, KV-cache use), as many as
        one bounded pass of scrapes allows; live pages are told of the figures that changed."""
        done = scraper.run([a for a in applications if serving_metrics.scraped(a)])
        names = {a.pk: a.name for a in applications}
        groups.send(
            [
                (
                    groups.application_group(pk),
                    {"type": "serving.metrics", "name": names[pk], **figures},
                )
                for pk, figures in done.figures.items()
            ]
        )
        return done

    def acting(self) -> bool:
        """Whether this reconciler may act now: always without an elector, else while it
        leads."""
        return self.leader is None or self.leader.leading()

    def follow_clusters(self) -> None:
        """A follower (watch threads) for every Kubernetes cluster not yet followed; the
        followers of deleted clusters stop, and each follower watches the namespaces its
        cluster's profiles use now."""
        with self._followers_lock:
            self._follow_clusters()

    def _follow_clusters(self) -> None:
        from jobs.reconciler.watching import (
            ClusterFollower,  # loads the Kubernetes client only when needed
        )

        if not self.acting():  # the Lease was lost meanwhile: stand_down has run or will
            return
        clusters = list(Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES))
        for pk in set(self.followers) - {cluster.pk for cluster in clusters}:
            _, follower = self.followers.pop(pk)
            follower.stop()
            logger.info("stopped following cluster %s: it is deleted", follower.cluster.name)
        for cluster in clusters:
            key = (cluster.pk, cluster.kubeconfig_path, cluster.context, cluster.in_cluster)
            if cluster.pk in self.followers and self.followers[cluster.pk][0] == key:
                self.followers[cluster.pk][1].sync_streams()
                continue
            if cluster.pk in self.followers:  # its connection changed: follow it anew
                self.followers[cluster.pk][1].stop()
            self._discover(cluster)
            follower = ClusterFollower(cluster, acting=self.acting)
            self.drainers.append(follower.start()[0])
            self.followers[cluster.pk] = (key, follower)
            logger.info("following cluster %s", cluster.name)

    def _discover(self, cluster) -> None:
        """Add-ons change rarely; reading them when following starts keeps the rules true."""
        from jobs.backends.kubernetes.backend import discover
        from jobs.backends.kubernetes.errors import BackendError

        try:
            discover(cluster)
        except BackendError as error:
            logger.warning("cluster %s: add-ons not discovered: %s", cluster.name, error)

    def step(self) -> int:
        close_old_connections()
        changed = self.step_local()
        changed += len(self.sleep_kubernetes())
        now = time.monotonic()
        due = self.scraped_kubernetes_at is None
        if due or now - self.scraped_kubernetes_at >= KUBERNETES_SCRAPE_SECONDS:
            self.scraped_kubernetes_at = now
            self.scrape_kubernetes()
        return changed

    def stand_down(self, timeout: float = 5.0) -> None:
        """Stop following every cluster and wait (bounded) for the drain threads, which record:
        what a leader does on losing its Lease, before another may take it. (The watch threads
        only read; each ends when its watch call returns.)"""
        with self._followers_lock:
            followers, self.followers = self.followers, {}
        for _, follower in followers.values():
            follower.stop()
        deadline = time.monotonic() + timeout
        for _, follower in followers.values():
            if follower.drainer is not None:
                follower.drainer.join(max(0.0, deadline - time.monotonic()))

    def run(self) -> None:
        logger.info("reconciler started; observing every %.1f s", self.interval)
        if self.leader is not None:
            self.leader.on_stopped = self.stand_down
            self.leader.start(self.stopping)
        resumed = False
        while not self.stopping.is_set():
            if not self.acting():  # another replica leads: follow nothing, campaign on
                self.stand_down()
                self.stopping.wait(min(self.interval, self.leader.times.retry_period))
                continue
            if not resumed:
                self._resume_local()
                resumed = True
            try:
                self.follow_clusters()
                self.step()
            except Exception:  # the database may be restarting: back off and try again
                logger.exception("reconciler step failed; retrying")
                self.stopping.wait(min(self.interval * 5, 30))
            self.stopping.wait(self.interval)
        self.stand_down()
        if self.leader is not None:
            self.leader.join(self.leader.times.retry_period * 5)  # it gives the Lease up
        self.local_scraper.close()
        self.kubernetes_scraper.close()
        # Local model servers stop with the console; resume() brings them back next time.
        forget_local_runner()
        logger.info("reconciler stopped")

    def _resume_local(self) -> None:
        for runner in local_runners_on_disk():
            resumed = runner.resume()
            if resumed:
                logger.info("started again the local model servers of %s", ", ".join(resumed))

    def stop(self, *_):
        self.stopping.set()
