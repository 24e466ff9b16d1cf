"""The hostile-input harness (tests/jobs/test_hostile_inputs.py, tests/console/test_api_fuzz.py)
extended to the checks of issue 21: generated media links, `background` values and
X-Forwarded-For headers, and bodies of any size in any number of pieces. Whatever is sent, the
answer is one of the few the rule allows, in the one error shape, quoting nothing it was sent;
never a 5xx, never a link that reaches the model server. Bounded and derandomised."""

from __future__ import annotations

import asyncio
import ipaddress

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.asgi import BoundedBody
from jobs.gateway.edge import address_of, client_address, networks
from jobs.gateway.media import blocked
from tests.gateway.support import caught_up, make_app, make_key

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MEDIA_KEYS = ("image_url", "audio_url", "video_url", "file_url")
HOSTS = [
    "127.0.0.1", "localhost", "[::1]", "169.254.169.254", "10.1.2.3", "0", "0x7f000001",
    "2130706433", "[::ffff:7f00:1]", "example.com", "93.184.215.14", "[fe80::1%25eth0]",
]  # fmt: skip
SCHEMES = ["http", "https", "HTTP", "file", "data", "ftp", "gopher", "javascript", ""]


@st.composite
def links(draw) -> str:
    if draw(st.booleans()):
        return draw(st.text(max_size=80))
    scheme = draw(st.sampled_from(SCHEMES))
    user = draw(st.sampled_from(["", "user@", "a:b@", "example.com@", "x\\@"]))
    host = draw(st.sampled_from(HOSTS) | st.text(min_size=1, max_size=20))
    port = draw(st.sampled_from(["", ":80", ":0", ":99999", ":x"]))
    path = draw(st.text(max_size=30))
    return f"{scheme}://{user}{host}{port}/{path}"


@st.composite
def chats(draw) -> dict:
    key = draw(st.sampled_from(MEDIA_KEYS))
    url = draw(links())
    value = draw(st.sampled_from(["object", "string", "nested"]))
    part = {"type": key, key: {"url": url} if value == "object" else url}
    if value == "nested":
        part = {"type": "text", "text": "x", "extra": [{"deeper": part}]}
    body = {"model": "alpha", "messages": [{"role": "user", "content": [part]}]}
    if draw(st.booleans()):
        body["background"] = draw(st.none() | st.booleans() | st.integers() | st.text(max_size=5))
    return body


@pytest.fixture
def world(org, alpha, gateway):
    make_app(org, "alpha", alpha.url)
    _, plain = make_key(org)
    caught_up(gateway)
    return plain


@PROPERTY
@given(body=chats(), path=st.sampled_from(["/v1/chat/completions", "/v1/responses"]))
def test_generated_media_links_are_refused_at_their_field_or_pass_as_data(
    gateway, world, body, path
):
    answer = httpx.post(
        gateway.url + path, headers={"Authorization": f"Bearer {world}"}, json=body, timeout=30
    )
    assert answer.status_code in (200, 400), answer.text
    if answer.status_code == 200:
        sent = [url for key in MEDIA_KEYS for url in _urls(body, key)]
        assert all(url[:5].lower() == "data:" for url in sent), sent
        return
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] and error["message"].startswith(error["param"] + ":")
    for key in MEDIA_KEYS:
        for found in _urls(body, key):
            if len(found) > 8:
                assert found not in error["message"], "the link was quoted back"


def _urls(value, key):
    if isinstance(value, dict):
        for name, item in value.items():
            if name == key and isinstance(item, str):
                yield item
            elif name == key and isinstance(item, dict) and isinstance(item.get("url"), str):
                yield item["url"]
            else:
                yield from _urls(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _urls(item, key)


TRUSTED = networks(["127.0.0.0/8", "10.0.0.0/8", "::1"])
hops = st.sampled_from(["203.0.113.9", "10.0.0.2", "127.0.0.1", "2001:db8::1", "[::1]:80"]) | (
    st.text(max_size=20)
)


@settings(max_examples=300, derandomize=True, database=None)
@given(
    peer=st.sampled_from(["127.0.0.1", "10.9.9.9", "198.51.100.7", "::1", "2001:db8::9"]),
    header=st.lists(st.lists(hops, max_size=5).map(", ".join), max_size=3),
)
def test_a_forwarded_for_header_never_yields_an_address_the_rule_does_not(peer, header):
    found = client_address(peer, header, TRUSTED)
    if not any(address_of(peer) in n for n in TRUSTED) or not header:
        assert found == peer  # the header of a client that is not a proxy is never read
        return
    if found is None:
        return  # a hop that is not an address: unknown, refused where an address matters
    address = ipaddress.ip_address(found)
    written = [address_of(h) for value in header for h in value.split(",")]
    assert address in written  # one of the hops, never made up
    # Every hop right of the one taken is a trusted proxy.
    right = written[len(written) - 1 - written[::-1].index(address) + 1 :]
    assert all(h is not None and any(h in n for n in TRUSTED) for h in right)


@settings(max_examples=300, derandomize=True, database=None)
@given(text=st.text(max_size=40))
def test_no_spelling_of_an_address_is_judged_public_when_it_is_not(text):
    address = address_of(text)
    if address is not None and not address.is_global:
        assert blocked(address)


def run_bounded(limit: int, pieces: list[int], declared: bool) -> tuple[int, int]:
    """(status, bytes the application read) for a body of `pieces` through BoundedBody."""
    read = bytearray()
    statuses: list[int] = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            read.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    messages = [
        {"type": "http.request", "body": b"x" * size, "more_body": i < len(pieces) - 1}
        for i, size in enumerate(pieces)
    ] or [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    headers = [(b"content-length", str(sum(pieces)).encode())] if declared else []
    scope = {"type": "http", "path": "/api/v1/applications", "headers": headers}
    asyncio.run(BoundedBody(app, limit)(scope, receive, send))
    assert len(statuses) == 1, statuses
    return statuses[0], len(read)


@settings(max_examples=200, derandomize=True, database=None)
@given(
    pieces=st.lists(st.integers(min_value=0, max_value=700), max_size=8),
    declared=st.booleans(),
)
def test_a_body_over_the_limit_is_one_413_and_the_application_reads_at_most_the_limit(
    pieces, declared
):
    limit = 1000
    status, read = run_bounded(limit, pieces, declared)
    total = sum(pieces)
    if total > limit:
        assert status == 413 and read <= limit
        if declared:
            assert read == 0  # refused before a byte of the body
    else:
        assert status == 200 and read == total
