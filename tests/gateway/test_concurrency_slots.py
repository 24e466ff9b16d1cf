"""Concurrent-request slots in Redis (database 13 here) are held exactly as long as their
requests run: never expired under a running stream, never counted below zero, given back
when a request ends however it ends, a gateway restart included."""

import threading

import httpx
import pytest
import redis

from jobs.gateway import limits
from tests.gateway.support import caught_up, fresh_minute, live_gateway, make_app, make_key
from tests.gateway.test_aborted_streams import PROMPT, READ, content_of
from tests.helpers import TEST_REDIS_URL, wait_for

REDIS_URL = TEST_REDIS_URL
PREFIX = "servedeck:gw"


@pytest.fixture
def store(transactional_db):
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    client.flushdb()
    return client


def slots_taken(store, key_id: int) -> int:
    """The key's concurrency slots in use, whichever way the limiter keeps them in Redis."""
    now = float(".".join(str(part) for part in store.time()))
    taken = 0
    for name in store.keys(f"{PREFIX}:c:k{key_id}*"):
        kind = store.type(name)
        if kind == "string":
            taken += int(store.get(name))
        elif kind == "zset":
            taken += store.zcount(name, now, "+inf")
    return taken


def counters_below_zero(store) -> list[str]:
    return [
        name
        for name in store.keys(f"{PREFIX}:*")
        if store.type(name) == "string" and int(store.get(name)) < 0
    ]


class Stream(threading.Thread):
    """A slow stream read in a thread: `started` once its first text arrived, `read` counts
    the text events, `stop_after` hangs up after that many."""

    def __init__(self, url: str, plain: str, stop_after: int | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.plain, self.stop_after = url, plain, stop_after
        self.started = threading.Event()
        self.read = 0
        self.status = None

    def run(self) -> None:
        body = {
            "model": "alpha",
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
            "fault": "slow",
        }
        try:
            with httpx.stream(
                "POST",
                self.url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {self.plain}"},
                json=body,
                timeout=30,
            ) as reply:
                self.status = reply.status_code
                for line in reply.iter_lines():
                    if content_of(line):
                        self.read += 1
                        self.started.set()
                        if self.read == self.stop_after:
                            return
        except httpx.HTTPError:
            pass  # the gateway went away mid-stream
        finally:
            self.started.set()


def call(url, plain):
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


def test_a_slot_is_held_for_as_long_as_its_stream_runs(store, org, alpha, monkeypatch):
    """The probe, with the counter's time to live shortened: a refused request returned before
    the counter's expiry was renewed, the counter expired under a running stream, a second
    request got in (limit 1, two at once), and the first one's end counted the slot below 0."""
    monkeypatch.setattr(limits, "CONCURRENCY_TTL", 2)
    live = live_gateway(redis_url=REDIS_URL, read_timeout=30.0)
    try:
        make_app(org, "alpha", alpha.url)
        key, plain = make_key(org, concurrent_requests=1)
        caught_up(live)
        first = Stream(live.url, plain)
        first.start()
        assert first.started.wait(30), "the stream never began"
        statuses = []
        while first.is_alive():  # some 7 s: several times the slots' time to live
            statuses.append(call(live.url, plain).status_code)
            if first.is_alive():
                assert slots_taken(store, key.pk) == 1
            first.join(0.25)
        assert first.status == 200 and first.read > READ
        assert statuses and set(statuses[:-1]) == {429}, statuses
        wait_for(lambda: slots_taken(store, key.pk) == 0, "the slot was not given back")
        assert call(live.url, plain).status_code == 200
        wait_for(lambda: slots_taken(store, key.pk) == 0, "the slot was not given back")
        assert counters_below_zero(store) == []
        # Every request metered once; the refused ones with no tokens.
        records = live.meter.settled(len(statuses) + 2)
        assert len(records) == len(statuses) + 2
        assert all(r.prompt_tokens == r.completion_tokens == 0 for r in records if r.status == 429)
    finally:
        live.stop()


def test_a_gateway_restart_leaves_the_keys_tokens_and_slots_exact(store, org, alpha):
    """The gateway stops while a stream runs (its server cancels what is left after a short
    grace): the stream is metered with what it sent, its tokens are counted and its slot is
    given back; the next gateway process admits the key's next request at once."""
    make_app(org, "alpha", alpha.url)
    key, plain = make_key(org, concurrent_requests=1, tokens_per_minute=10**6)
    fresh_minute(margin=25)
    first_gateway = live_gateway(redis_url=REDIS_URL, read_timeout=30.0)
    try:
        caught_up(first_gateway)
        stream = Stream(first_gateway.url, plain)
        stream.start()
        wait_for(lambda: stream.read >= READ, "the stream never got going", timeout=30)
        first_gateway.server.config.timeout_graceful_shutdown = 0.2
    finally:
        first_gateway.stop()
    stream.join(30)
    [record] = first_gateway.meter.settled(1)
    assert record.prompt_tokens == 30
    assert READ <= record.completion_tokens < 35  # what was sent, not the whole answer
    minute = int(record.at // limits.WINDOW)
    counted = store.get(f"{PREFIX}:t:k{key.pk}:{minute}")
    assert int(counted or 0) == record.prompt_tokens + record.completion_tokens
    assert slots_taken(store, key.pk) == 0
    second_gateway = live_gateway(redis_url=REDIS_URL)
    try:
        caught_up(second_gateway)
        assert call(second_gateway.url, plain).status_code == 200
    finally:
        second_gateway.stop()
    assert slots_taken(store, key.pk) == 0 and counters_below_zero(store) == []
