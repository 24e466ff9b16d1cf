"""The gateway process's view of each replica: its requests in flight, its back-off after a
failure, and what its runtime says of its queue and KV cache (vLLM's /metrics, read every few
seconds); and `Router.send`, which runs one request on the replica replica_choice.py picks, and
on another when it failed before anything reached the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from jobs.overview.serving_metrics import MAX_METRICS_BYTES, VLLM_RUNTIMES, parse

from . import replica_choice
from .errors import GatewayError
from .snapshot import Route
from .upstream_failures import ReplicaFailed

logger = logging.getLogger(__name__)

BACKOFF_FIRST = 1.0  # seconds out after a first failure, doubled at each next one
BACKOFF_MOST = 30.0
SCRAPE_EVERY = 2.0
FIGURES_FOR = 10.0  # older figures are not used: the replica stopped answering them
_RINGS_KEPT = 1000


class Router:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.in_flight: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.out_until: dict[str, float] = {}
        self.figures: dict[str, tuple[float | None, float | None, float]] = {}
        self._rings: dict[tuple[str, ...], replica_choice.Ring] = {}
        self._turn = 0

    # -- the choice

    def ring(self, replicas: tuple[str, ...]) -> replica_choice.Ring:
        found = self._rings.get(replicas)
        if found is None:
            if len(self._rings) > _RINGS_KEPT:
                self._rings.clear()
            found = self._rings[replicas] = replica_choice.Ring.of(replicas)
        return found

    def load(self, replica: str, now: float) -> float:
        waiting, kv, at = self.figures.get(replica, (None, None, 0.0))
        if now - at > FIGURES_FOR:
            waiting = kv = None
        return replica_choice.load_of(self.in_flight.get(replica, 0), waiting, kv)

    def choose(self, route: Route, key: int | None, tried: set[str]) -> str | None:
        """A replica of the route not tried yet for this request: one that is not backed off
        if any, else (all of them failed lately) the one whose back-off ends first."""
        replicas = route.replicas or ((route.upstream,) if route.upstream else ())
        if len(replicas) == 1:
            return None if replicas[0] in tried else replicas[0]
        now = self.clock()
        left = [r for r in replicas if r not in tried]
        if not left:
            return None
        up = [r for r in left if self.out_until.get(r, 0.0) <= now]
        if not up:
            return min(left, key=lambda r: self.out_until.get(r, 0.0))
        self._turn += 1
        loads = {r: self.load(r, now) for r in up}
        return replica_choice.choose(up, loads, key, self.ring(replicas), self._turn)

    def failed(self, replica: str) -> None:
        count = self.failures[replica] = self.failures.get(replica, 0) + 1
        backoff = min(BACKOFF_FIRST * 2 ** (count - 1), BACKOFF_MOST)
        self.out_until[replica] = self.clock() + backoff

    def answered(self, replica: str) -> None:
        if self.failures.pop(replica, None) is not None:
            self.out_until.pop(replica, None)

    # -- one request

    async def send(
        self,
        route: Route,
        key: int | None,
        call: Callable[[str], Awaitable[None]],
        started: Callable[[], bool],
    ) -> None:
        """`call(upstream)` on a chosen replica; when the replica failed (ReplicaFailed) and
        `started()` says nothing reached the client, on the next one, until none is left."""
        tried: set[str] = set()
        while True:
            upstream = self.choose(route, key, tried)
            if upstream is None:
                raise GatewayError(503, f"The model '{route.name}' has no replica answering.")
            tried.add(upstream)
            self.in_flight[upstream] = self.in_flight.get(upstream, 0) + 1
            try:
                await call(upstream)
            except ReplicaFailed as failure:
                self.failed(upstream)
                if failure.retry and not started() and self.choose(route, key, tried):
                    continue
                raise
            else:
                self.answered(upstream)
                return
            finally:
                left = self.in_flight[upstream] - 1
                if left:
                    self.in_flight[upstream] = left
                else:
                    del self.in_flight[upstream]

    # -- the runtimes' own figures

    async def scrape(self, session: aiohttp.ClientSession, routes: list[Route]) -> None:
        """Read vLLM's queue and KV-cache use from each replica of each route with more than
        one (a replica's /metrics is at its root: KServe's /openai prefix goes)."""
        replicas = [
            r for route in routes if route.running and len(route.replicas) > 1
            for r in route.replicas
        ]  # fmt: skip
        if not replicas:
            return
        timeout = aiohttp.ClientTimeout(total=1.0)
        await asyncio.gather(*(self._scrape_one(session, r, timeout) for r in replicas))

    async def _scrape_one(self, session, replica: str, timeout) -> None:
        base = replica.removesuffix("/openai")
        with contextlib.suppress(Exception):
            async with session.get(base + "/metrics", timeout=timeout) as response:
                if response.status != 200:
                    return
                text = (await response.content.read(MAX_METRICS_BYTES)).decode("utf-8", "replace")
            found = parse(text)
            waiting, kv = found.get("requests_waiting"), found.get("kv_cache_usage")
            if waiting is not None or kv is not None:
                self.figures[replica] = (waiting, kv, self.clock())

    async def keep_scraping(self, session_of, routes_of, every: float = SCRAPE_EVERY) -> None:
        """scrape every few seconds, until cancelled (the gateway's shutdown)."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.scrape(session_of(), with_vllm_figures(routes_of()))
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("gateway: reading the replicas' figures failed")


def with_vllm_figures(routes: list[Route]) -> list[Route]:
    """The routes whose replicas publish vLLM's /metrics: vLLM's, and vLLM's CPU build's on
    the local backend."""
    return [r for r in routes if r.runtime in VLLM_RUNTIMES]
