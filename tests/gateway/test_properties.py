"""Random paths, headers and bodies never make the gateway answer 500, and every answer is
metered once. The app is called in process (ASGI messages) with a snapshot of one key and
one application whose upstream refuses connections."""

import asyncio
import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.gateway.app import Gateway
from jobs.gateway.snapshot import Key, Limits, Route, Secret, Snapshot, SnapshotKeeper
from tests.gateway.support import RecordingMeter, free_port

PLAIN = "sdk_abcdef012345" + "x" * 43
KEY = Key(
    1,
    1,
    "k",
    hashlib.sha256(PLAIN.encode()).hexdigest(),
    None,
    True,
    frozenset(),
    Limits(10**9, 10**9, 10**9),
)
ROUTES = {
    (1, "alpha"): Route(
        1, 1, "alpha", "Running", "", f"http://127.0.0.1:{free_port()}", "vllm", None, None, 0
    ),
    (1, "speech"): Route(
        2, 1, "speech", "Running", "", f"http://127.0.0.1:{free_port()}", "parakeet", None, None, 0
    ),
    (1, "down"): Route(3, 1, "down", "Failed", "no GPU", "", "vllm", None, None, 0),
    # Translated dialects (dialects.py): their requests are rebuilt before they are sent.
    (1, "minilm"): Route(
        4, 1, "minilm", "Running", "", f"http://127.0.0.1:{free_port()}", "infinity", None, None, 0
    ),
    (1, "whisper"): Route(
        5,
        1,
        "whisper",
        "Running",
        "",
        f"http://127.0.0.1:{free_port()}",
        "faster-whisper",
        None,
        None,
        0,
    ),  # fmt: skip
}


def gateway() -> Gateway:
    snap = Snapshot(
        secrets={"abcdef012345": Secret(KEY, KEY.secret_hash, None)}, routes=ROUTES, version=0
    )
    keeper = SnapshotKeeper(loader=lambda v: snap, counter=lambda: 0, touch_writer=lambda i: None)
    return Gateway(meter=RecordingMeter(), keeper=keeper)


async def call(app, method, path, headers, body):
    sent = []
    chunks = [body[i : i + 7000] for i in range(0, len(body), 7000)] or [b""]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "query_string": b"",
    }
    await app(scope, receive, send)
    return sent


PATHS = st.one_of(
    st.sampled_from(
        [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/v1/models",
            "/v1/models/alpha",
            "/v1/audio/transcriptions",
            "/v1/audio/translations",
            "/v1/responses",
            "/v1/rerank",
            "/v1/score",
            "/metrics",
            "/v1/",
        ]
    ),
    st.text(max_size=40).map(lambda t: "/v1/" + t),
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
BODIES = st.one_of(
    st.binary(max_size=300),
    JSONISH.map(lambda v: __import__("json").dumps(v).encode()),
    st.fixed_dictionaries(
        {
            "model": st.sampled_from(
                ["alpha", "down", "speech", "minilm", "whisper", "nope", 3, None]
            ),
            "input": JSONISH,
            "query": JSONISH,
            "documents": JSONISH,
            "text_1": JSONISH,
            "dimensions": JSONISH,
            "stream": st.sampled_from([True, False, "yes", None]),
            "stream_options": st.sampled_from([None, {}, {"include_usage": True}, [], "x"]),
        }
    ).map(lambda d: __import__("json").dumps(d).encode()),
)
HEADERS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                b"authorization",
                b"x-api-key",
                b"content-type",
                b"content-length",
                b"host",
                b"x-other",
            ]
        ),
        st.one_of(
            st.binary(max_size=60),
            st.just(f"Bearer {PLAIN}".encode()),
            st.just(PLAIN.encode()),
            st.just(b"multipart/form-data; boundary=b"),
        ),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=PATHS,
    headers=HEADERS,
    body=BODIES,
)
def test_no_input_gives_a_500(method, path, headers, body):
    app = gateway()

    async def run():
        await app.startup()
        try:
            return await call(app, method, path, headers, body)
        finally:
            await app.shutdown()

    sent = asyncio.run(run())
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] != 500, sent
    assert len(app.meter.records) == 1
    assert app.meter.records[0].status == start["status"]


def test_a_policy_network_check_sees_ipv4_mapped_addresses():
    import ipaddress

    from jobs.gateway.request import check_network
    from jobs.gateway.snapshot import Grant

    grant = Grant(None, (ipaddress.ip_network("10.0.0.0/8"),), ())
    check_network(grant, {"client": ("::ffff:10.1.2.3", 1)}, ROUTES[(1, "alpha")])
    for outside in ("::ffff:11.0.0.1", "192.168.0.1", "not-an-address"):
        try:
            check_network(grant, {"client": (outside, 1)}, ROUTES[(1, "alpha")])
        except Exception as refused:
            assert refused.status == 403
        else:
            raise AssertionError(f"{outside} was let through")
