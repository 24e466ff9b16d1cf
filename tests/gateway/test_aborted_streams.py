"""A stream is metered with what it delivered, however it ends: the client hanging up, the
model server breaking off, or a complete answer. The tokens settle against the key's
tokens-per-minute limit (in process and in Redis) and each request is metered exactly once."""

import json
import time

import httpx
import pytest
import redis

from jobs.gateway.limits import WINDOW
from tests.gateway.support import caught_up, fresh_minute, live_gateway, make_app, make_key
from tests.helpers import TEST_REDIS_URL, wait_for

REDIS_URL = TEST_REDIS_URL
PROMPT = " ".join(f"w{i}" for i in range(30))  # 30 tokens to the stand-in (a token is a word)
ANSWER = 5 + 30  # "Hello from alpha. You said:" and the prompt back, a word per event
READ = 10  # content events the client reads before it hangs up


def redis_or_skip() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    client.flushdb()
    return client


@pytest.fixture(params=["process", "redis"])
def live(request, transactional_db):
    """The gateway with its limits in process, or in Redis (database 13 here)."""
    kwargs = {"read_timeout": 30.0}
    if request.param == "redis":
        redis_or_skip()
        kwargs["redis_url"] = REDIS_URL
    gateway = live_gateway(**kwargs)
    yield gateway
    gateway.stop()


def tokens_counted(live, key_id: int) -> int:
    """The key's tokens this minute as its limiter counted them."""
    limiter = live.gateway.limiter
    minute = int(time.time() // WINDOW)
    if live.gateway.redis_url:
        value = redis.Redis.from_url(REDIS_URL).get(f"servedeck:gw:t:k{key_id}:{minute}")
        return int(value) if value is not None else 0
    found = limiter.windows.get(f"t:k{key_id}")
    return found[1] if found is not None and found[0] == minute else 0


def content_of(line: str) -> str:
    """The generated text one SSE line carries (chat, completions or the Responses API)."""
    if not line.startswith("data: {"):
        return ""
    event = json.loads(line[6:])
    if event.get("type") == "response.output_text.delta":
        return event["delta"]
    for choice in event.get("choices") or []:
        text = (choice.get("delta") or {}).get("content") or choice.get("text")
        if text:
            return text
    return ""


def read_then_hang_up(live, plain, path, body, events=READ) -> list[str]:
    """POST a stream, read `events` events with generated text, then close the connection."""
    lines = []
    with httpx.stream(
        "POST",
        live.url + path,
        headers={"Authorization": f"Bearer {plain}"},
        json=body,
        timeout=30,
    ) as reply:
        assert reply.status_code == 200, reply.read()
        read = 0
        for line in reply.iter_lines():
            lines.append(line)
            if content_of(line):
                read += 1
                if read == events:
                    break
    return lines


def chat_body(**extra):
    messages = [{"role": "user", "content": PROMPT}]
    return {"model": "alpha", "messages": messages, "stream": True, "fault": "slow", **extra}


def call(live, plain):
    return httpx.post(
        live.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


def test_a_stream_the_client_leaves_is_metered_and_limited_with_what_it_was_sent(live, org, alpha):
    """The probe: a key of few tokens per minute read most of an answer and hung up before the
    usage chunk; it was metered 0 tokens and its next calls went through."""
    make_app(org, "alpha", alpha.url)
    key, plain = make_key(org, tokens_per_minute=30 + READ)
    caught_up(live)
    fresh_minute(margin=20)
    lines = read_then_hang_up(live, plain, "/v1/chat/completions", chat_body())
    # vLLM's running usage, which the gateway asked for, does not reach a client that did not.
    assert not any('"usage"' in line for line in lines)
    [record] = live.meter.settled(1)
    assert record.status == 499 and record.stream
    assert record.prompt_tokens == 30  # the running usage says the prompt exactly
    assert READ <= record.completion_tokens < ANSWER  # what was sent, never the whole answer
    metered = record.prompt_tokens + record.completion_tokens
    wait_for(lambda: tokens_counted(live, key.pk) == metered, "the limit did not count them")
    refused = call(live, plain)
    assert refused.status_code == 429, refused.text
    assert len(live.meter.settled(2)) == 2  # the hung-up stream was metered once


def test_a_stream_the_model_server_breaks_off_is_metered_with_what_it_sent(gateway, org, alpha):
    make_app(org, "alpha", alpha.url)
    key, plain = make_key(org, tokens_per_minute=10**6)
    caught_up(gateway)
    fresh_minute()
    body = {**chat_body(), "fault": "die"}  # the role event, one word, then the connection drops
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json=body,
        timeout=30,
    ) as reply:
        text = reply.read().decode()
    assert '"error"' in text
    [record] = gateway.meter.settled(1)
    assert record.failed_in_stream
    assert (record.prompt_tokens, record.completion_tokens) == (30, 1)
    wait_for(lambda: tokens_counted(gateway, key.pk) == 31, "the limit did not count them")


def test_a_runtime_without_running_usage_is_metered_by_the_text_events_it_sent(gateway, org, alpha):
    """transformers serve says usage only at the end and has no tokenizer route: an answer cut
    short counts one token per event of generated text, and its prompt is estimated."""
    make_app(org, "alpha", alpha.url, served_by="transformers")
    key, plain = make_key(org, tokens_per_minute=10**6)
    caught_up(gateway)
    fresh_minute()
    read_then_hang_up(gateway, plain, "/v1/chat/completions", chat_body())
    [record] = gateway.meter.settled(1)
    assert record.status == 499
    assert READ <= record.completion_tokens < ANSWER
    assert record.prompt_tokens > 0
    metered = record.prompt_tokens + record.completion_tokens
    wait_for(lambda: tokens_counted(gateway, key.pk) == metered, "the limit did not count them")


def test_a_responses_stream_the_client_leaves_counts_its_prompt_with_the_runtimes_tokenizer(
    gateway, org, alpha
):
    """vLLM's Responses API streams usage only in its last event: the prompt is counted by
    the model server's own /tokenize, the answer by its text events."""
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    body = {"model": "alpha", "input": PROMPT, "stream": True, "fault": "slow"}
    read_then_hang_up(gateway, plain, "/v1/responses", body)
    [record] = gateway.meter.settled(1)
    assert record.status == 499
    assert record.prompt_tokens == 30
    assert READ <= record.completion_tokens < ANSWER
    assert "tokenize: 30" in alpha.events()


@pytest.mark.parametrize(
    "options, sees_running",
    [(None, False), ({"include_usage": True, "continuous_usage_stats": True}, True)],
)
def test_a_complete_stream_is_metered_once_with_the_runtimes_totals(
    gateway, org, alpha, options, sees_running
):
    """Two choices, each with its running usage: the total is the final usage chunk's. The
    client sees running usage only when it asked for it itself."""
    make_app(org, "alpha", alpha.url)
    key, plain = make_key(org, tokens_per_minute=10**6)
    caught_up(gateway)
    fresh_minute()
    body = {**chat_body(n=2), "fault": None, "stream_options": options}
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json=body,
        timeout=30,
    ) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: {")]
    running = [line for line in lines if '"usage"' in line and '"choices": []' not in line]
    assert bool(running) == sees_running
    [record] = gateway.meter.settled(1)
    assert record.status == 200
    assert (record.prompt_tokens, record.completion_tokens) == (30, 2 * ANSWER)
    wait_for(lambda: tokens_counted(gateway, key.pk) == 30 + 2 * ANSWER, "not counted")
