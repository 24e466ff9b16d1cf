"""A key just made and a model just Running work on their first call, whichever process made
the change: a call the gateway's snapshot would refuse (an unknown key, a model unknown or
not running) first makes it look for a change once, at most so often, then answers.

The gateways here read the change counter once an hour on their own, so only that look can
find the change."""

import httpx
import pytest

from jobs.backends.base import Observed
from jobs.lifecycle import record_status
from tests.gateway.support import live_gateway, make_app, make_key


@pytest.fixture
def start_slow(transactional_db):
    """Starts a gateway when called (after what the test made before it)."""
    started = []

    def start():
        started.append(live_gateway(interval=3600))
        return started[-1]

    yield start
    for live in started:
        live.stop()


def chat(live, plain, model="alpha"):
    return httpx.post(
        live.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


def test_a_key_made_a_moment_ago_works_on_its_first_call(org, alpha, start_slow):
    make_app(org, "alpha", alpha.url)
    slow = start_slow()
    _, plain = make_key(org)
    reply = chat(slow, plain)
    assert reply.status_code == 200, reply.text
    assert [r.status for r in slow.meter.settled(1)] == [200]


def test_a_model_that_just_turned_running_answers_its_first_call(org, alpha, start_slow):
    app = make_app(org, "alpha", alpha.url, phase="Loading")
    _, plain = make_key(org)
    slow = start_slow()
    assert chat(slow, plain).status_code == 503  # Loading, as the look for a change says
    record_status(app, Observed(phase="Running", endpoint=alpha.url))
    reply = chat(slow, plain)
    assert reply.status_code == 200, reply.text


def test_a_model_made_a_moment_ago_answers_its_first_call(org, alpha, start_slow):
    _, plain = make_key(org)
    slow = start_slow()
    assert chat(slow, plain).status_code == 404
    make_app(org, "alpha", alpha.url)
    assert chat(slow, plain).status_code == 200


def test_refusals_that_no_change_explains_stay_refusals_and_load_nothing(org, alpha, start_slow):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    slow = start_slow()
    assert chat(slow, plain).status_code == 200
    loads = slow.gateway.keeper.reloads
    unknown = "sdk_" + "0" * 12 + "x" * 43
    statuses = [chat(slow, unknown).status_code for _ in range(5)]
    statuses += [chat(slow, plain, model="nowhere").status_code for _ in range(5)]
    assert statuses == [401] * 5 + [404] * 5
    assert slow.gateway.keeper.reloads == loads  # the counter had not moved: nothing reloaded
    assert len(slow.meter.settled(11)) == 11
