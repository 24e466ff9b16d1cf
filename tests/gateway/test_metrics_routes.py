"""/metrics holds one series per route, never one per path a client made up: anonymous requests
for /v1/models/<anything> (or any other path) add to the counts of a known route and leave the
size of /metrics as it was (finding 2 of issue 21: 100 requests of 4 KB paths made it 9 MB)."""

import secrets

import httpx
import pytest
from django.utils import timezone

from accesspolicies.models import VerifiedDomain
from jobs.gateway.app import Gateway
from jobs.gateway.metering import Meter
from jobs.gateway.proxy import Timeouts
from jobs.gateway.snapshot import SnapshotKeeper
from tests.gateway.support import LiveGateway, caught_up, make_app, make_key

# Every route the meter may name: the public routes, /v1/models, /metrics and "other".
KNOWN_ROUTES = {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/embeddings",
    "/v1/score",
    "/v1/rerank",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/models",
    "/metrics",
    "other",
}


@pytest.fixture
def metered_gateway(transactional_db):
    """A live gateway with the product's own Meter (not flushed: /metrics reads its totals)."""
    gateway = Gateway(
        meter=Meter(),
        keeper=SnapshotKeeper(interval=0.2),
        timeouts=Timeouts(connect=2.0, read=5.0),
        start_meter=False,
    )
    live = LiveGateway(gateway)
    yield live
    live.stop()


def metrics(live) -> str:
    answer = httpx.get(live.url + "/metrics", timeout=10)
    assert answer.status_code == 200
    return answer.text


def routes_in(text: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        if line.startswith("servedeck_gateway_requests_total{"):
            found.add(line.split('route="', 1)[1].split('"', 1)[0])
    return found


def test_anonymous_made_up_paths_do_not_grow_metrics(metered_gateway):
    live = metered_gateway
    httpx.get(live.url + "/v1/models/warm-up", timeout=10)  # one of each kind counted first
    httpx.get(live.url + "/v1/nothing-here", timeout=10)
    metrics(live)  # /metrics counts itself too: from the second call on, its series is there
    before = len(metrics(live))
    made_up = [secrets.token_hex(2048) for _ in range(40)]  # 4 KB each
    with httpx.Client(timeout=10) as client:
        for index, tail in enumerate(made_up):
            path = ("/v1/models/", "/v1/models", "/v1/", "/")[index % 4] + tail
            answer = client.get(live.url + path)
            assert answer.status_code in (401, 404), answer.text
    text = metrics(live)
    assert not any(tail[:64] in text for tail in made_up), "a client's path became a label"
    assert routes_in(text) <= KNOWN_ROUTES, routes_in(text)
    # The same series as before, with larger counts: the size grows by digits, not by paths.
    assert len(text) < before + 200, (before, len(text))


def test_a_caller_with_a_key_asking_for_made_up_models_is_counted_under_v1_models(
    metered_gateway, org, alpha
):
    live = metered_gateway
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    live.wait_reload(live.gateway.keeper.reloads)
    headers = {"Authorization": f"Bearer {plain}"}
    for tail in ("alpha", "no-such-model", secrets.token_hex(512)):
        httpx.get(f"{live.url}/v1/models/{tail}", headers=headers, timeout=10)
    text = metrics(live)
    assert routes_in(text) <= KNOWN_ROUTES, routes_in(text)
    assert 'route="/v1/models"' in text and "no-such-model" not in text


def test_metrics_are_not_served_on_an_applications_host(metered_gateway, org):
    """An application exposed on a domain sends every path of `<app>.<domain>` to the gateway
    (from the Internet, through the cluster's load balancer, so from a private address):
    /metrics there is an unknown path, answered only on the gateway's own address."""
    VerifiedDomain.objects.create(
        organization=org, domain="example.com", verified_at=timezone.now()
    )
    make_app(
        org, "public", "http://127.0.0.1:9", access={"exposure": "Domain", "domain": "example.com"}
    )
    caught_up(metered_gateway)
    for host in ("public.example.com", "PUBLIC.example.com:443"):
        answer = httpx.get(metered_gateway.url + "/metrics", headers={"Host": host}, timeout=10)
        assert answer.status_code == 404, host
        assert "servedeck_gateway" not in answer.text
        assert "Unknown path" in answer.json()["error"]["message"]
    assert "servedeck_gateway_requests_total" in metrics(metered_gateway)
