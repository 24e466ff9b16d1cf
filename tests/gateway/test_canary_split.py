"""The gateway's split during a Canary rollout (pure): sticky per key and conversation, the
canary's share near its weight, a caller kept as the weight rises, a canary with no ready
replica taking nothing, and a stable revision being replaced sending everything to the
canary."""

from jobs.gateway.snapshot import Route
from jobs.gateway.split import bucket, pick, with_rollout

STABLE, CANARY = "http://127.0.0.1:9001", "http://127.0.0.1:9002"


def route(phase="Running", replicas=(STABLE,)) -> Route:
    return Route(
        id=1,
        organization_id=1,
        name="chat",
        phase=phase,
        reason="",
        upstream=replicas[0] if replicas else "",
        runtime="vllm",
        policy_name=None,
        policy=None,
        created=0,
        replicas=tuple(replicas),
    )


def rolled(weight: int, canary=(CANARY,), state="Progressing", base=None) -> Route:
    return with_rollout(base or route(), 1, 2, weight, list(canary), state)


def test_one_key_and_conversation_always_lands_on_one_revision():
    split = rolled(50)
    for key_id in range(20):
        for affinity in (None, 7, 123456789):
            seen = {pick(split, key_id, affinity)[1] for _ in range(5)}
            assert len(seen) == 1


def test_the_canary_takes_about_its_weight_and_keeps_its_callers_as_it_rises():
    callers = [(key_id, affinity) for key_id in range(50) for affinity in range(40)]
    chosen = {}
    for weight in (10, 50):
        split = rolled(weight)
        chosen[weight] = {c for c in callers if pick(split, *c)[1] == 2}
        share = len(chosen[weight]) / len(callers)
        assert abs(share - weight / 100) < 0.03, share
    assert chosen[10] <= chosen[50]


def test_the_canary_route_is_the_canary_replicas_and_the_stable_one_untouched():
    split = rolled(100)
    to, revision = pick(split, 1, None)
    assert revision == 2 and to.replicas == (CANARY,) and to.upstream == CANARY
    assert to.canary is None and to.running
    none = rolled(0)
    to, revision = pick(none, 1, None)
    assert revision == 1 and to.replicas == (STABLE,)


def test_a_canary_with_no_ready_replica_takes_nothing():
    split = rolled(100, canary=())
    assert {pick(split, k, None)[1] for k in range(50)} == {1}


def test_without_a_rollout_nothing_is_metered_by_revision():
    assert pick(route(), 1, None) == (route(), None)


def test_while_promoted_the_canary_serves_if_the_stable_replicas_do_not():
    replacing = rolled(100, state="Promoting", base=route("Loading", ()))
    assert replacing.running and replacing.replicas == (CANARY,)
    assert {pick(replacing, k, None)[1] for k in range(20)} == {2}


def test_buckets_spread_over_0_to_99():
    found = {bucket(k, None) for k in range(2000)}
    assert min(found) == 0 and max(found) == 99 and len(found) == 100


def test_a_benchmark_goes_to_the_revision_it_measures_whatever_the_split():
    callers = [(-key_id, affinity) for key_id in range(1, 20) for affinity in (None, 7, 99)]
    for weight in (1, 50, 99):
        split = rolled(weight)
        assert {pick(split, *c, 2)[1] for c in callers} == {2}
        assert {pick(split, *c, 2)[0].upstream for c in callers} == {CANARY}
        assert {pick(split, *c, 1)[1] for c in callers} == {1}
        assert {pick(split, *c, 1)[0].upstream for c in callers} == {STABLE}
    # A canary with no ready replica takes nothing, not even its benchmark.
    assert pick(rolled(50, canary=()), -1, None, 2)[1] == 1
