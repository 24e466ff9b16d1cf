"""The reconciler's scrapes of the Running vLLM servers' figures, bounded per pass: a few workers,
a budget of time after which no further scrape starts, and the applications tried longest ago
first. A slow cluster, many applications or a server dripping its /metrics thus hold up the
reconciler's status work (every organisation's) for at most about the budget plus one scrape
(serving_metrics.SCRAPE_DEADLINE_SECONDS); what a pass leaves out goes first in the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property

from jobs.overview import serving_metrics

logger = logging.getLogger(__name__)

SCRAPE_WORKERS = 4
SCRAPE_BUDGET_SECONDS = 3.0


@dataclass
class ScrapePass:
    """What one pass did: the applications it tried (by pk, in the order taken), the figures
    of those whose figures changed, and those it left for the next pass."""

    tried: list[int] = field(default_factory=list)
    figures: dict[int, dict] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)


class Scraper:
    """Keeps, across passes, when each application was last tried (the fairness order)."""

    def __init__(self, workers: int = SCRAPE_WORKERS, budget: float = SCRAPE_BUDGET_SECONDS):
        self.workers = max(1, workers)
        self.budget = budget
        self.passes = 0
        self.tried_in: dict[int, int] = {}  # application pk -> the pass that last tried it

    @cached_property
    def pool(self) -> ThreadPoolExecutor:
        # Kept from pass to pass: each worker's connections (the cache's Redis, the clusters'
        # API clients) are reused, not opened anew every pass.
        return ThreadPoolExecutor(self.workers, thread_name_prefix="servedeck-scrape")

    def close(self) -> None:
        if "pool" in self.__dict__:
            self.pool.shutdown(wait=False, cancel_futures=True)
            del self.pool

    def run(self, applications: list) -> ScrapePass:
        """Scrape what the budget allows of `applications` (each worker tries one at least, so
        every pass moves on through them), and wait for the scrapes it started."""
        self.passes += 1
        known = {a.pk for a in applications}
        self.tried_in = {pk: n for pk, n in self.tried_in.items() if pk in known}
        waiting = deque(sorted(applications, key=lambda a: (self.tried_in.get(a.pk, 0), a.pk)))
        done = ScrapePass()
        lock = threading.Lock()
        until = time.monotonic() + self.budget

        def work() -> None:
            first = True
            while True:
                with lock:
                    if not waiting or (not first and time.monotonic() >= until):
                        return
                    application = waiting.popleft()
                    self.tried_in[application.pk] = self.passes
                    done.tried.append(application.pk)
                first = False
                try:
                    figures = serving_metrics.observe(application)
                except Exception:  # one application's trouble must not stop the others
                    logger.exception("could not scrape the metrics of %s", application.name)
                    continue
                if figures is not None:
                    with lock:
                        done.figures[application.pk] = figures

        # Each scrape ends by its own deadline, and none starts past the budget: this wait ends.
        wait([self.pool.submit(work) for _ in range(min(self.workers, len(waiting)))])
        done.skipped = [a.pk for a in waiting]
        if done.skipped:
            logger.info(
                "serving metrics: %d of %d applications left for the next pass (budget %g s)",
                len(done.skipped),
                len(applications),
                self.budget,
            )
        return done
