"""A stream's tokens are counted whatever the client says about usage: `stream_options: null`
(which the client may send) must not hide them from metering and the tokens-per-minute limit."""

import httpx
import pytest

from tests.gateway.support import caught_up, make_app, make_key


@pytest.mark.parametrize("options", [None, {}, {"include_usage": False}])
def test_a_stream_is_metered_with_its_tokens(gateway, org, alpha, options):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    body = {
        "model": "alpha",
        "messages": [{"role": "user", "content": "Say three words"}],
        "stream": True,
        "stream_options": options,
    }
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json=body,
        timeout=30,
    ) as reply:
        assert reply.status_code == 200
        text = reply.read().decode()
    assert '"usage"' not in text.replace('"usage": null', "")  # the client did not ask for it
    [record] = gateway.meter.settled(1)
    assert record.status == 200 and record.stream
    assert record.prompt_tokens > 0 and record.completion_tokens > 0, record


@pytest.mark.parametrize("stream", [1, "true", "yes", [1]])
def test_stream_that_is_not_a_boolean_is_refused(gateway, org, alpha, stream):
    """A model server reads `"stream": 1` or `"true"` as true (vLLM's lax booleans), which the
    gateway would meter as a plain answer without its tokens: refused, naming the field."""
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    reply = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "stream" and "true or false" in error["message"]
    assert [r.status for r in gateway.meter.settled(1)] == [400]


def test_stream_false_and_null_are_plain_answers(gateway, org, alpha):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    for stream in (False, None):
        reply = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {plain}"},
            json={
                "model": "alpha",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": stream,
            },
            timeout=30,
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0
