"""Every error a client gets, in OpenAI's shape with the right status; keys revoked, expired and
rotated; policies; limits; faults of the upstream and the client; each metered exactly once."""

import json
import socket
import threading
from datetime import timedelta

import httpx
import openai
import pytest
from django.utils import timezone

from accesspolicies.models import AccessPolicy, APIKey, VerifiedDomain
from accesspolicies.secrets import API_KEY
from tests.gateway.support import caught_up, free_port, fresh_minute, make_app, make_key
from tests.helpers import TEST_REDIS_URL, wait_for


@pytest.fixture
def world(org, alpha, gateway):
    app = make_app(org, "alpha", alpha.url)
    key, plain = make_key(org)
    caught_up(gateway)
    return app, key, plain


def chat(gateway, plain, model="alpha", headers=None, **body):
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}", **(headers or {})},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], **body},
        timeout=30,
    )


def error_of(reply):
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_missing_unknown_and_wrong_keys_get_one_401(gateway, world):
    _, key, plain = world
    missing = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "alpha"})
    unknown = chat(gateway, "sdk_" + "0" * 12 + "x" * 43)
    wrong = chat(gateway, plain[:-1] + ("A" if plain[-1] != "A" else "B"))
    assert [r.status_code for r in (missing, unknown, wrong)] == [401, 401, 401]
    assert missing.json() == unknown.json() == wrong.json()
    assert error_of(wrong)["type"] == "authentication_error"
    records = gateway.meter.settled(3)
    assert [r.status for r in records] == [401] * 3 and all(r.api_key_id is None for r in records)


def test_a_revoked_key_is_refused_once_the_counter_moved(gateway, world):
    _, key, plain = world
    assert chat(gateway, plain).status_code == 200
    key.revoked_at = timezone.now()
    key.save()
    caught_up(gateway)  # the counter, read once a second (here more often), without Redis
    assert chat(gateway, plain).status_code == 401


def test_an_expired_key_is_refused(gateway, org, world):
    _, plain = make_key(org, "old", expires_at=timezone.now() - timedelta(seconds=1))
    caught_up(gateway)
    assert chat(gateway, plain).status_code == 401


def test_a_rotated_key_keeps_its_old_secret_until_the_grace_ends(gateway, world):
    _, key, old = world
    lookup, new, digest = API_KEY.mint()
    key.previous_lookup, key.previous_secret_hash = key.lookup, key.secret_hash
    key.previous_expires_at = timezone.now() + timedelta(minutes=5)
    key.lookup, key.secret_hash = lookup, digest
    key.save()
    caught_up(gateway)
    assert chat(gateway, new).status_code == 200
    assert chat(gateway, old).status_code == 200
    key.previous_expires_at = timezone.now() - timedelta(seconds=1)
    key.save()
    caught_up(gateway)
    assert chat(gateway, old).status_code == 401
    assert chat(gateway, new).status_code == 200


def test_a_key_scoped_to_another_application_is_not_allowed(gateway, org, world):
    make_app(org, "other", "http://127.0.0.1:9")
    _, plain = make_key(org, "scoped", all_applications=False, applications=["other"])
    caught_up(gateway)
    reply = chat(gateway, plain)
    assert reply.status_code == 403 and "not allowed" in error_of(reply)["message"]


def test_unknown_model_and_other_organisations_models_are_404(gateway, world, other_org):
    _, _, plain = world
    make_app(other_org, "secret-model", "http://127.0.0.1:9")
    _, theirs = make_key(other_org, "theirs")
    caught_up(gateway)
    for name in ("nope", "secret-model"):
        reply = chat(gateway, plain, model=name)
        assert reply.status_code == 404 and error_of(reply)["param"] == "model"
    assert chat(gateway, theirs, model="alpha").status_code == 404


def test_a_model_not_running_is_503_with_its_phase_and_reason(gateway, org, world):
    make_app(org, "loading", "", phase="Loading")
    caught_up(gateway)
    reply = chat(gateway, world[2], model="loading")
    assert reply.status_code == 503
    message = error_of(reply)["message"]
    # Its phase and a plain reason; the status's own reason (which may quote the model
    # server's log lines) is for the members' pages (tests/gateway/test_not_running_reason.py).
    assert "Loading" in message and "try again" in message
    assert "loading for a test" not in message


def test_malformed_and_too_large_bodies(gateway, world):
    _, _, plain = world
    auth = {"Authorization": f"Bearer {plain}"}
    url = gateway.url + "/v1/chat/completions"
    for raw in (b"{not json", b"[1, 2]", b'{"model": 3}', b'{"messages": []}'):
        reply = httpx.post(url, headers=auth, content=raw)
        assert reply.status_code == 400, raw
        error_of(reply)
    big = b'{"model": "alpha", "x": "' + b"a" * (9 * 1024 * 1024) + b'"}'
    assert httpx.post(url, headers=auth, content=big).status_code == 413
    with httpx.stream("POST", url, headers=auth, content=iter([big[:4096], big[4096:]])) as r:
        assert r.status_code == 413  # chunked, no Content-Length: counted while read


def test_requests_per_minute_limit_answers_429_with_retry_after(gateway, org, world):
    _, plain = make_key(org, "limited", requests_per_minute=2)
    caught_up(gateway)
    fresh_minute()
    statuses = [chat(gateway, plain).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    refused = chat(gateway, plain)
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert error_of(refused)["type"] == "rate_limit_error"
    ai = openai.OpenAI(base_url=gateway.url + "/v1", api_key=plain, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        ai.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "x"}])
    assert [m.id for m in ai.models.list()] == ["alpha"]  # listing models is not limited
    records = gateway.meter.settled(6)
    assert [r.status for r in records] == [200, 200, 429, 429, 429, 200]


def test_tokens_per_minute_counted_from_usage(gateway, org, world):
    _, plain = make_key(org, "tokens", tokens_per_minute=10)
    caught_up(gateway)
    fresh_minute()
    assert chat(gateway, plain).status_code == 200  # 1 + 6 tokens
    assert chat(gateway, plain).status_code == 200  # 14 now: the next one waits
    assert chat(gateway, plain).status_code == 429


def test_concurrent_requests_limit(gateway, org, world):
    _, plain = make_key(org, "one-at-a-time", concurrent_requests=1)
    caught_up(gateway)
    waiting = threading.Thread(target=chat, args=(gateway, plain), kwargs={"fault": "hang"})
    waiting.start()  # holds the one slot until the gateway's read timeout (2 s): 504
    wait_for(
        lambda: any(gateway.gateway.limiter.in_flight.values()),
        "the first request never reached the limiter",
        every=0.01,
    )
    refused = chat(gateway, plain)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    waiting.join()
    assert chat(gateway, plain).status_code == 200  # the slot came back


def test_policy_lists_keys_overrides_limits_and_networks(gateway, org, alpha, world):
    _, member, member_plain = world
    _, outsider = make_key(org, "not-listed")
    policy = AccessPolicy.objects.create(
        organization=org, name="partners", all_keys=False, requests_per_minute=1
    )
    policy.keys.add(member)
    fresh_minute()
    VerifiedDomain.objects.create(
        organization=org, domain="example.com", verified_at=timezone.now()
    )
    make_app(
        org,
        "public",
        alpha.url,
        access={"exposure": "Domain", "domain": "example.com", "accessPolicy": "partners"},
    )
    caught_up(gateway)
    assert chat(gateway, outsider, model="public").status_code == 403
    # Routed by host name: the model field may be left out.
    by_host = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {member_plain}", "Host": "public.example.com"},
        json={"messages": [{"role": "user", "content": "x"}]},
    )
    assert by_host.status_code == 404  # the stand-in serves "alpha": it got model "public"
    assert "public" in by_host.text
    assert chat(gateway, member_plain, model="public").status_code == 429  # policy's 1/min used
    policy.requests_per_minute = None
    policy.allowed_networks = ["10.0.0.0/8"]
    policy.save()
    caught_up(gateway)
    reply = chat(gateway, member_plain, model="public")
    assert reply.status_code == 403 and "network" in error_of(reply)["message"]
    policy.allowed_networks = ["127.0.0.0/8"]
    policy.save()
    caught_up(gateway)
    assert chat(gateway, member_plain, model="public").status_code == 404  # through, as above


def test_upstream_refusing_is_502(gateway, org, world):
    make_app(org, "gone", f"http://127.0.0.1:{free_port()}")
    caught_up(gateway)
    reply = chat(gateway, world[2], model="gone")
    assert reply.status_code == 502 and error_of(reply)["code"] == "upstream_failed"
    (record,) = gateway.meter.settled(1)
    assert record.status == 502


def test_upstream_crash_is_502(gateway, world):
    assert chat(gateway, world[2], fault="crash").status_code == 502


def test_upstream_hanging_is_504_and_the_upstream_sees_the_close(gateway, alpha, world):
    before = alpha.events().count("client went away while waiting")
    reply = chat(gateway, world[2], fault="hang")  # the gateway's read timeout here is 2 s
    assert reply.status_code == 504 and error_of(reply)["code"] == "upstream_timeout"
    wait_for(
        lambda: alpha.events().count("client went away while waiting") > before,
        "the upstream never saw the gateway go",
    )
    (record,) = gateway.meter.settled(1)
    assert record.status == 504


def test_upstream_dying_mid_stream_is_a_failure_in_the_stream(gateway, world):
    ai = openai.OpenAI(base_url=gateway.url + "/v1", api_key=world[2], max_retries=0)
    stream = ai.chat.completions.create(
        model="alpha",
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        extra_body={"fault": "die"},
    )
    with pytest.raises(openai.APIError) as failed:
        list(stream)
    assert "middle of the answer" in str(failed.value)
    (record,) = gateway.meter.settled(1)
    assert record.status == 200 and record.failed_in_stream and record.stream


def test_an_error_event_inside_a_stream_counts_as_failure(gateway, world):
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {world[2]}"},
        json={
            "model": "alpha",
            "stream": True,
            "fault": "error",
            "messages": [{"role": "user", "content": "x"}],
        },
    ) as reply:
        text = reply.read().decode()
    assert '"error"' in text
    (record,) = gateway.meter.settled(1)
    assert record.failed_in_stream


def test_client_leaving_mid_stream_closes_the_upstream(gateway, alpha, world):
    before = alpha.events().count("client went away during a stream")
    body = json.dumps(
        {
            "model": "alpha",
            "stream": True,
            "fault": "slow",
            "messages": [{"role": "user", "content": "a b c d e f g h"}],
        }
    ).encode()
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {world[2]}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert b"200" in sock.recv(65536)  # headers, and perhaps the first event
    wait_for(
        lambda: alpha.events().count("client went away during a stream") > before,
        "the upstream never saw the client go",
        timeout=10,
    )
    (record,) = gateway.meter.settled(1)
    assert record.status == 499 and record.stream


def test_last_use_is_written_off_the_request_path(gateway, world):
    _, key, plain = world
    assert chat(gateway, plain).status_code == 200
    wait_for(lambda: APIKey.objects.get(pk=key.pk).last_used_at, "last_used_at was never written")


def test_with_redis_a_change_is_announced_at_once(settings, org, alpha, transactional_db):
    import redis

    url = TEST_REDIS_URL
    try:
        redis.Redis.from_url(url).ping()
    except redis.RedisError:
        pytest.skip("Redis is not running on 127.0.0.1:6379")
    settings.REDIS_URL = url
    from tests.gateway.support import live_gateway

    live = live_gateway(interval=3600, redis_url=url)  # the counter alone would take an hour
    try:
        make_app(org, "alpha", alpha.url)
        key, plain = make_key(org)
        caught_up(live)
        assert chat(live, plain).status_code == 200
        key.revoked_at = timezone.now()
        key.save()
        caught_up(live)
        assert chat(live, plain).status_code == 401
    finally:
        live.stop()
