"""The judge of a Canary step, table-driven: waits below the minimum of requests on either side,
rolls back on a server error rate above the stable one's by more than the limit, or on a p95
latency (or mean time to first token) slower by more than the limit (and the slack), promotes
otherwise; and the weight after a promotion."""

import pytest

from jobs.rollouts.judge import (
    PROMOTE,
    ROLL_BACK,
    WAIT,
    Limits,
    RevisionFigures,
    judge,
    next_weight,
)
from jobs.usage.histogram import BUCKET_COUNT, LATENCY_BOUNDS_MS

LIMITS = Limits(max_error_rate_increase=0.02, max_latency_increase=0.25, min_requests=100)


def at(ms: float, count: int) -> tuple[int, ...]:
    """A histogram with `count` requests in the bucket of `ms`."""
    buckets = [0] * BUCKET_COUNT
    index = next((i for i, b in enumerate(LATENCY_BOUNDS_MS) if ms <= b), BUCKET_COUNT - 1)
    buckets[index] = count
    return tuple(buckets)


def figures(revision, requests, errors=0, ms=200.0, ttft=None):
    return RevisionFigures(
        revision=revision,
        requests=requests,
        server_errors=errors,
        latency_buckets=at(ms, requests),
        ttft_ms_sum=(ttft or 0) * requests,
        ttft_count=requests if ttft is not None else 0,
    )


@pytest.mark.parametrize(
    ("stable", "canary", "decision", "says"),
    [
        (figures(1, 99), figures(2, 500), WAIT, "revision 1 has answered 99 of the 100"),
        (figures(1, 500), figures(2, 10), WAIT, "revision 2 has answered 10"),
        (figures(1, 1000), figures(2, 100, errors=5), ROLL_BACK, "5.0% more"),
        (figures(1, 1000, errors=10), figures(2, 100, errors=3), PROMOTE, "within the limits"),
        (figures(1, 1000, errors=10), figures(2, 100, errors=4), ROLL_BACK, "3.0% more"),
        (figures(1, 1000, ms=200), figures(2, 100, ms=2000), ROLL_BACK, "p95 latency"),
        (figures(1, 1000, ms=200), figures(2, 100, ms=220), PROMOTE, "within the limits"),
        # a few milliseconds on fast answers is noise, whatever the ratio
        (figures(1, 1000, ms=2), figures(2, 100, ms=20), PROMOTE, "within the limits"),
        (
            figures(1, 1000, ttft=100),
            figures(2, 100, ttft=300),
            ROLL_BACK,
            "mean time to first token",
        ),
        (figures(1, 1000, ttft=100), figures(2, 100, ttft=110), PROMOTE, "within the limits"),
    ],
)
def test_the_judge(stable, canary, decision, says):
    verdict = judge(stable, canary, LIMITS)
    assert verdict.decision == decision, verdict.reason
    assert says in verdict.reason
    assert verdict.figures["stable"]["requests"] == stable.requests
    assert verdict.figures["canary"]["revision"] == canary.revision
    assert verdict.figures["limits"]["minRequests"] == 100


def test_a_canary_with_no_requests_waits():
    verdict = judge(figures(1, 1000), RevisionFigures(2), LIMITS)
    assert verdict.decision == WAIT and verdict.figures["canary"]["errorRate"] is None


@pytest.mark.parametrize(
    ("steps", "step", "weight"), [((10, 50), 0, 50), ((10, 50), 1, 100), ((25,), 0, 100)]
)
def test_next_weight(steps, step, weight):
    assert next_weight(steps, step) == weight
