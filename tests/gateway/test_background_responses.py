"""`/v1/responses` with `background: true` would start work whose result route the gateway
does not serve (GET /v1/responses/{id}) and whose usage it cannot meter: it is refused with a
400 that names the field and what to send instead, and never reaches the model server
(finding 9 of issue 21). A plain or streamed response is served as before."""

import httpx
import pytest

from tests.gateway.support import caught_up, make_app, make_key


@pytest.fixture
def world(org, alpha, gateway):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    return plain


def responses(gateway, plain, **body):
    return httpx.post(
        gateway.url + "/v1/responses",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "alpha", "input": "Say three words", **body},
        timeout=30,
    )


def served(alpha) -> float:
    text = httpx.get(alpha.url + "/metrics", timeout=5).text
    line = next(x for x in text.splitlines() if x.startswith("vllm:request_success_total"))
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("background", [True, "true", 1, {"x": 1}])
def test_background_is_refused_before_the_model_server(gateway, world, alpha, background):
    before = served(alpha)
    answer = responses(gateway, world, background=background)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "background" and error["type"] == "invalid_request_error"
    assert "background" in error["message"] and "false" in error["message"]
    assert "'x'" not in error["message"] and '"x"' not in error["message"]  # nothing echoed
    assert served(alpha) == before
    records = gateway.meter.settled(1)
    assert records[-1].status == 400 and records[-1].route == "/v1/responses"


@pytest.mark.parametrize("background", [False, None])
def test_a_foreground_response_is_served(gateway, world, background):
    answer = responses(gateway, world, background=background)
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"]
