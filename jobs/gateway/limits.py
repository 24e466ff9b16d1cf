"""Requests per minute, tokens per minute and concurrent requests, per key (or per key under an
access policy). In process by default; in Redis when REDIS_URL is set, so several gateway
processes share one limit: one script call (one round trip) before the request, one pipeline
after the answer (tokens counted from what it sent, the concurrency slot given back).

Minutes are fixed windows: a refused request says how long until the window turns over
(Retry-After). Tokens are only known after the answer, so a request is refused when the
minute's tokens already reached the limit.

In Redis a concurrency slot is a lease: one member per request in a sorted set per counter,
scored with the moment it lapses (by Redis's clock). The process holding it renews it every
third of CONCURRENCY_TTL while the request runs, so a slot never lapses under a running
request, and one a dead process left lapses after CONCURRENCY_TTL. Giving a slot back removes
its own lease, so a count is never below zero and never gives back another request's slot.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
import uuid
from typing import Protocol

import redis.asyncio as aioredis  # at import, never first in a thread (see snapshot.py)

from .snapshot import Check

logger = logging.getLogger(__name__)

WINDOW = 60
# A concurrency slot (a lease) lapses this long after it was taken or last renewed: a running
# request's is renewed every third of it; one a dead process left lapses within it.
CONCURRENCY_TTL = 30
# Answers finished within this long share one round trip to give their slots back.
SETTLE_BATCH_SECONDS = 0.002
KIND_WORDS = {
    "r": "requests per minute",
    "t": "tokens per minute",
    "c": "concurrent requests",
}


class Refused(Exception):
    def __init__(self, check: Check, retry_after: int) -> None:
        super().__init__(check.kind)
        self.check = check
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        what = KIND_WORDS[self.check.kind]
        return (
            f"Rate limit reached: this key may make {self.check.limit} {what}. "
            f"Retry after {self.retry_after} s, or ask an admin to raise the key's limit."
        )


def _retry_after(check: Check, now: float) -> int:
    if check.kind == "c":
        return 1
    return max(1, math.ceil(WINDOW - now % WINDOW))


class Limiter(Protocol):
    async def acquire(self, checks: tuple[Check, ...], now: float) -> str | None:
        """Count the request in, or raise Refused; what it returns goes back to settle()."""

    async def settle(
        self, checks: tuple[Check, ...], now: float, tokens: int, held: str | None = None
    ) -> None: ...

    async def flush(self) -> None: ...

    async def close(self) -> None: ...


class LocalLimiter:
    """Counters in this process (one event loop: no lock needed)."""

    def __init__(self) -> None:
        self.windows: dict[str, tuple[int, int]] = {}  # counter -> (minute, count)
        self.in_flight: dict[str, int] = {}

    def _count(self, counter: str, minute: int) -> int:
        found = self.windows.get(counter)
        return found[1] if found is not None and found[0] == minute else 0

    async def acquire(self, checks: tuple[Check, ...], now: float) -> None:
        minute = int(now // WINDOW)
        for check in checks:
            used = (
                self.in_flight.get(check.counter, 0)
                if check.kind == "c"
                else self._count(check.counter, minute)
            )
            if used >= check.limit:
                raise Refused(check, _retry_after(check, now))
        for check in checks:
            if check.kind == "r":
                self.windows[check.counter] = (minute, self._count(check.counter, minute) + 1)
            elif check.kind == "c":
                self.in_flight[check.counter] = self.in_flight.get(check.counter, 0) + 1
        if len(self.windows) > 100_000:  # old minutes of keys no longer calling
            self.windows = {c: v for c, v in self.windows.items() if v[0] == minute}

    async def settle(
        self, checks: tuple[Check, ...], now: float, tokens: int, held: str | None = None
    ) -> None:
        minute = int(now // WINDOW)
        for check in checks:
            if check.kind == "c":
                self.in_flight[check.counter] = max(0, self.in_flight.get(check.counter, 1) - 1)
            elif check.kind == "t" and tokens:
                self.windows[check.counter] = (minute, self._count(check.counter, minute) + tokens)

    async def flush(self) -> None:
        pass

    async def close(self) -> None:
        pass


# Redis's own clock, in seconds: every gateway process dates leases alike. (Redis before 5
# replicates a script that reads the clock only by its effects when asked to.)
_NOW = """
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""
# KEYS: the counters; ARGV: kind and limit of each, then the minute window's TTL, the lease's
# seconds and the lease's name. Checks all first (a concurrency count drops the lapsed leases
# first), then counts: a refused request uses nothing. Returns the 1-based index of the
# refusing check, or 0.
ACQUIRE_SCRIPT = (
    _NOW
    + """
local n = #KEYS
local window, held, lease = ARGV[2 * n + 1], tonumber(ARGV[2 * n + 2]), ARGV[2 * n + 3]
for i = 1, n do
  local used
  if ARGV[2 * i - 1] == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    used = redis.call('ZCARD', KEYS[i])
  else
    used = tonumber(redis.call('GET', KEYS[i]) or '0')
  end
  if used >= tonumber(ARGV[2 * i]) then return i end
end
for i = 1, n do
  local kind = ARGV[2 * i - 1]
  if kind == 'r' then
    if redis.call('INCR', KEYS[i]) == 1 then redis.call('EXPIRE', KEYS[i], window) end
  elseif kind == 'c' then
    redis.call('ZADD', KEYS[i], now + held, lease)
    redis.call('EXPIRE', KEYS[i], math.ceil(held) + 1)
  end
end
return 0
"""
)
# KEYS: one counter; ARGV: the lease's seconds, then this process's leases on it, renewed (or
# put back, after a stall longer than a lease: their requests still run).
RENEW_SCRIPT = (
    _NOW
    + """
local held = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + held, ARGV[i]) end
redis.call('EXPIRE', KEYS[1], math.ceil(held) + 1)
return 0
"""
)


class RedisLimiter:
    """Counters in Redis shared by every gateway process. If Redis cannot be reached the
    request is let through (limits are a fairness tool, not an authentication) and a warning
    is written at most once a minute."""

    def __init__(
        self,
        url: str,
        prefix: str = "servedeck:gw",
        max_connections: int = 100,
        lease_seconds: float | None = None,
    ) -> None:
        self.redis = aioredis.Redis.from_url(
            url, socket_timeout=2, socket_connect_timeout=2, max_connections=max_connections
        )
        self.script = self.redis.register_script(ACQUIRE_SCRIPT)
        self.renew_script = self.redis.register_script(RENEW_SCRIPT)
        self.prefix = prefix
        self.lease_seconds = float(CONCURRENCY_TTL if lease_seconds is None else lease_seconds)
        self._lease_names = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())
        self._warned = 0.0
        self._pending: dict[str, int] = {}  # counter -> tokens to add, not yet sent
        self._held: dict[str, set[str]] = {}  # counter -> this process's leases on it
        self._releases: dict[str, list[str]] = {}  # counter -> leases to give back, not yet sent
        self._flusher: asyncio.Future | None = None
        self._renewer: asyncio.Future | None = None
        # Renewals and releases reach Redis one after the other: a renewal read before a
        # release can never put the released lease back after it.
        self._writing = asyncio.Lock()

    def _names(self, checks: tuple[Check, ...], minute: int) -> list[str]:
        return [
            f"{self.prefix}:{c.counter}:held"
            if c.kind == "c"
            else f"{self.prefix}:{c.counter}:{minute}"
            for c in checks
        ]

    def _warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned > 60:
            self._warned = now
            logger.warning("gateway: Redis limit counters unavailable (%s); not limiting", what)

    async def acquire(self, checks: tuple[Check, ...], now: float) -> str | None:
        """Count the request in (or raise Refused); the lease it took, if any, for settle()."""
        minute = int(now // WINDOW)
        names = self._names(checks, minute)
        lease = next(self._lease_names) if any(c.kind == "c" for c in checks) else None
        args: list[object] = []
        for check in checks:
            args += (check.kind, check.limit)
        args += (WINDOW + 1, self.lease_seconds, lease or "")
        try:
            refused = await self.script(keys=names, args=args)
        except Exception as error:
            self._warn(type(error).__name__)
            return None
        if refused:
            check = checks[int(refused) - 1]
            raise Refused(check, _retry_after(check, now))
        if lease is not None:
            for check, name in zip(checks, names, strict=True):
                if check.kind == "c":
                    self._held.setdefault(name, set()).add(lease)
            if self._renewer is None or self._renewer.done():
                self._renewer = asyncio.ensure_future(self._renew_while_held())
        return lease

    async def settle(
        self, checks: tuple[Check, ...], now: float, tokens: int, held: str | None = None
    ) -> None:
        """Give the request's lease back and add its tokens: batched with the other requests
        answered within the same couple of milliseconds, so a busy process makes one round
        trip for many."""
        minute = int(now // WINDOW)
        for check, name in zip(checks, self._names(checks, minute), strict=True):
            if check.kind == "c":
                leases = self._held.get(name)
                if held is not None and leases is not None and held in leases:
                    leases.discard(held)
                    if not leases:
                        del self._held[name]
                    self._releases.setdefault(name, []).append(held)
            elif check.kind == "t" and tokens:
                self._pending[name] = self._pending.get(name, 0) + tokens
        if (self._pending or self._releases) and self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(SETTLE_BATCH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        """Send what settle() batched now."""
        pending, self._pending = self._pending, {}
        releases, self._releases = self._releases, {}
        self._flusher = None
        if not pending and not releases:
            return
        pipe = self.redis.pipeline(transaction=False)
        for name, tokens in pending.items():
            pipe.incrby(name, tokens)
            pipe.expire(name, WINDOW + 1)
        for name, leases in releases.items():
            pipe.zrem(name, *leases)
        async with self._writing:
            try:
                await pipe.execute()
            except Exception as error:
                self._warn(type(error).__name__)

    async def _renew_while_held(self) -> None:
        while self._held:
            await asyncio.sleep(self.lease_seconds / 3)
            await self.renew()

    async def renew(self) -> None:
        """Renew every lease this process holds (one round trip)."""
        async with self._writing:
            held = {name: sorted(leases) for name, leases in self._held.items() if leases}
            if not held:
                return
            pipe = self.redis.pipeline(transaction=False)
            for name, leases in held.items():
                args = [self.lease_seconds, *leases]
                await self.renew_script(keys=[name], args=args, client=pipe)
            try:
                await pipe.execute()
            except Exception as error:
                self._warn(type(error).__name__)

    async def close(self) -> None:
        """Give back what this process still holds (its requests are over) and flush."""
        for task in (self._flusher, self._renewer):
            if task is not None:
                task.cancel()
        self._flusher = self._renewer = None
        for name, leases in self._held.items():
            self._releases.setdefault(name, []).extend(leases)
        self._held = {}
        await self.flush()
        await self.redis.aclose()
