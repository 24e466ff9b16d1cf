"""Limit counters in process and in Redis (the test run's own database,
tests.helpers.TEST_REDIS_URL), and two gateway processes sharing one Redis enforcing one limit."""

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis

from accesspolicies.secrets import API_KEY
from jobs.gateway.limits import LocalLimiter, RedisLimiter, Refused
from jobs.gateway.snapshot import Check
from tests.gateway.support import free_port, fresh_minute
from tests.helpers import TEST_REDIS_URL, wait_for

REDIS_URL = TEST_REDIS_URL
RPM = (Check("r", "r:k1", 2),)
TPM = (Check("t", "t:k1", 10),)
ONE = (Check("c", "c:k1", 1),)


def redis_or_skip():
    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    redis.Redis.from_url(REDIS_URL).flushdb()


async def exercise(limiter):
    now = 120.0 * 60 + 15  # 15 s into a minute
    await limiter.acquire(RPM, now)
    await limiter.acquire(RPM, now)
    with pytest.raises(Refused) as refused:
        await limiter.acquire(RPM, now)
    assert refused.value.retry_after == 45
    await limiter.acquire(RPM, now + 50)  # the next minute starts afresh
    await limiter.acquire(TPM, now)
    await limiter.settle(TPM, now, 12)
    await limiter.flush()
    with pytest.raises(Refused):
        await limiter.acquire(TPM, now)
    held = await limiter.acquire(ONE, now)
    with pytest.raises(Refused) as busy:
        await limiter.acquire(ONE, now)
    assert busy.value.retry_after == 1
    await limiter.settle(ONE, now, 0, held)
    await limiter.flush()
    await limiter.acquire(ONE + RPM, now + 60)
    # A refused request counts nothing: the concurrency slot it would take stays free.
    with pytest.raises(Refused):
        await limiter.acquire(ONE, now + 60)
    await limiter.close()


def test_local_limiter():
    asyncio.run(exercise(LocalLimiter()))


def test_redis_limiter():
    redis_or_skip()
    asyncio.run(exercise(RedisLimiter(REDIS_URL, prefix="servedeck:test")))


def test_redis_down_lets_requests_through():
    limiter = RedisLimiter(f"redis://127.0.0.1:{free_port()}/0")
    asyncio.run(limiter.acquire(RPM, 0.0))


def answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    return True


@contextlib.contextmanager
def gateway_process(port, spec):
    script = Path(__file__).parent / "static_gateway.py"
    process = subprocess.Popen(
        [sys.executable, str(script), str(port), REDIS_URL, json.dumps(spec)]
    )
    try:
        wait_for(
            lambda: answers(f"http://127.0.0.1:{port}/v1/models"),
            "the gateway process did not start",
            timeout=30,
            every=0.1,
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_two_gateway_processes_share_one_limit(alpha):
    redis_or_skip()
    lookup, plain, digest = API_KEY.mint()
    spec = {"lookup": lookup, "digest": digest, "rpm": 4, "upstream": alpha.url}
    with gateway_process(free_port(), spec) as one, gateway_process(free_port(), spec) as two:
        statuses = []
        fresh_minute()
        for url in (one, two, one, two, one, two):
            reply = httpx.post(
                url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {plain}"},
                json={"model": "alpha", "messages": [{"role": "user", "content": "x"}]},
            )
            statuses.append(reply.status_code)
    assert statuses == [200, 200, 200, 200, 429, 429]
