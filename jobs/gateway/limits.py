"""Requests per minute, tokens per minute and concurrent requests, per key (or per key under an
access policy). In process by default; in Redis when REDIS_URL is set, so several gateway
processes share one limit: one script call (one round trip) before the request, one pipeline
after the answer (tokens counted from `usage`, the concurrency slot given back).

Minutes are fixed windows: a refused request says how long until the window turns over
(Retry-After). Tokens are only known after the answer, so a request is refused when the
minute's tokens already reached the limit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Protocol

from .snapshot import Check

logger = logging.getLogger(__name__)

WINDOW = 60
# A concurrency counter a dead process left behind expires after this long without use.
CONCURRENCY_TTL = 300
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
    async def acquire(self, checks: tuple[Check, ...], now: float) -> None: ...

    async def settle(self, checks: tuple[Check, ...], now: float, tokens: int) -> None: ...

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

    async def settle(self, checks: tuple[Check, ...], now: float, tokens: int) -> None:
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


# KEYS: the counters; ARGV: kind and limit of each, then the TTLs. Checks all first, then
# counts: a refused request uses nothing. Returns the 1-based index of the refusing check, or 0.
ACQUIRE_SCRIPT = """
local n = #KEYS
for i = 1, n do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used >= tonumber(ARGV[2 * i]) then return i end
end
local window, held = ARGV[2 * n + 1], ARGV[2 * n + 2]
for i = 1, n do
  local kind = ARGV[2 * i - 1]
  if kind == 'r' then
    if redis.call('INCR', KEYS[i]) == 1 then redis.call('EXPIRE', KEYS[i], window) end
  elseif kind == 'c' then
    redis.call('INCR', KEYS[i])
    redis.call('EXPIRE', KEYS[i], held)
  end
end
return 0
"""


class RedisLimiter:
    """Counters in Redis shared by every gateway process. If Redis cannot be reached the
    request is let through (limits are a fairness tool, not an authentication) and a warning
    is written at most once a minute."""

    def __init__(self, url: str, prefix: str = "servedeck:gw", max_connections: int = 100) -> None:
        import redis.asyncio as aioredis

        self.redis = aioredis.Redis.from_url(
            url, socket_timeout=2, socket_connect_timeout=2, max_connections=max_connections
        )
        self.script = self.redis.register_script(ACQUIRE_SCRIPT)
        self.prefix = prefix
        self._warned = 0.0
        self._pending: dict[str, int] = {}  # counter -> what to add, not yet sent
        self._flusher: asyncio.Future | None = None

    def _names(self, checks: tuple[Check, ...], minute: int) -> list[str]:
        return [
            f"{self.prefix}:{c.counter}" if c.kind == "c" else f"{self.prefix}:{c.counter}:{minute}"
            for c in checks
        ]

    def _warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned > 60:
            self._warned = now
            logger.warning("gateway: Redis limit counters unavailable (%s); not limiting", what)

    async def acquire(self, checks: tuple[Check, ...], now: float) -> None:
        minute = int(now // WINDOW)
        args: list[object] = []
        for check in checks:
            args += (check.kind, check.limit)
        args += (WINDOW + 1, CONCURRENCY_TTL)
        try:
            refused = await self.script(keys=self._names(checks, minute), args=args)
        except Exception as error:
            self._warn(type(error).__name__)
            return
        if refused:
            check = checks[int(refused) - 1]
            raise Refused(check, _retry_after(check, now))

    async def settle(self, checks: tuple[Check, ...], now: float, tokens: int) -> None:
        """Give slots back and add tokens: batched with the other requests answered within
        the same couple of milliseconds, so a busy process makes one round trip for many."""
        minute = int(now // WINDOW)
        for check, name in zip(checks, self._names(checks, minute), strict=True):
            if check.kind == "c":
                self._pending[name] = self._pending.get(name, 0) - 1
            elif check.kind == "t" and tokens:
                self._pending[name] = self._pending.get(name, 0) + tokens
        if self._pending and self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(SETTLE_BATCH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        """Send what settle() batched now."""
        pending, self._pending = self._pending, {}
        self._flusher = None
        if not pending:
            return
        pipe = self.redis.pipeline(transaction=False)
        for name, delta in pending.items():
            pipe.incrby(name, delta)
            if delta > 0:  # a tokens-per-minute window
                pipe.expire(name, WINDOW + 1)
        try:
            await pipe.execute()
        except Exception as error:
            self._warn(type(error).__name__)

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        await self.flush()
        await self.redis.aclose()
