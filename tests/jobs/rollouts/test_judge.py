"""The judge of a Canary step, table-driven: waits below the minimum of requests on either side,
rolls back on a server error rate above the stable one's by more than the limit, or on a p95
latency or p95 time to first token (its mean for rows without its histogram) slower by more than
the limit (and the slack), promotes otherwise; and the weight after a promotion."""

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


def at(ms: float, count: int, *more: tuple[float, int]) -> tuple[int, ...]:
    """A histogram with `count` requests in the bucket of `ms` (and `more` such pairs)."""
    buckets = [0] * BUCKET_COUNT
    for value, n in ((ms, count), *more):
        index = next((i for i, b in enumerate(LATENCY_BOUNDS_MS) if value <= b), BUCKET_COUNT - 1)
        buckets[index] += n
    return tuple(buckets)


def streams(revision, requests, *spread: tuple[float, int]):
    """Every request a stream, its time to first token spread as (ms, count) pairs."""
    total = sum(ms * n for ms, n in spread)
    return RevisionFigures(
        revision=revision,
        requests=requests,
        latency_buckets=at(200, requests),
        ttft_ms_sum=total,
        ttft_count=requests,
        ttft_buckets=at(*spread[0], *spread[1:]),
    )


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
        # With the histograms, the p95 decides: one slow stream in ten rolls back ...
        (
            streams(1, 1000, (100, 1000)),
            streams(2, 100, (100, 90), (2000, 10)),
            ROLL_BACK,
            "p95 time to first token",
        ),
        # ... four very slow ones in a hundred do not, though they triple the mean.
        (
            streams(1, 1000, (100, 1000)),
            streams(2, 100, (100, 96), (10000, 4)),
            PROMOTE,
            "within the limits",
        ),
    ],
)
def test_the_judge(stable, canary, decision, says):
    verdict = judge(stable, canary, LIMITS)
    assert verdict.decision == decision, verdict.reason
    assert says in verdict.reason
    assert verdict.figures["stable"]["requests"] == stable.requests
    assert verdict.figures["canary"]["revision"] == canary.revision
    assert verdict.figures["limits"]["minRequests"] == 100


def test_the_figures_show_both_revisions_p95_time_to_first_token():
    verdict = judge(streams(1, 1000, (100, 1000)), streams(2, 100, (100, 100)), LIMITS)
    assert verdict.figures["stable"]["ttftP95Ms"] == verdict.figures["canary"]["ttftP95Ms"]
    assert 50 < verdict.figures["canary"]["ttftP95Ms"] <= 100
    assert verdict.figures["ttftP95Increase"] == 0


def test_a_canary_with_no_requests_waits():
    verdict = judge(figures(1, 1000), RevisionFigures(2), LIMITS)
    assert verdict.decision == WAIT and verdict.figures["canary"]["errorRate"] is None


@pytest.mark.parametrize(
    ("steps", "step", "weight"), [((10, 50), 0, 50), ((10, 50), 1, 100), ((25,), 0, 100)]
)
def test_next_weight(steps, step, weight):
    assert next_weight(steps, step) == weight
