"""The benchmark's pure cores: the plan's bounds, the percentile math and a level's figures,
the synthetic prompts and tone. Tables of cases; no database, no timing asserted."""

import io
import wave

import pytest

from jobs.benchmark import plan as p
from jobs.benchmark import prompts
from jobs.benchmark.stats import Sample, percentile, summarise


@pytest.mark.parametrize(
    ("task", "route", "levels"),
    [
        ("chat", "/v1/chat/completions", (1, 4, 16)),
        ("embedding", "/v1/embeddings", (1, 4, 16)),
        ("speech", "/v1/audio/transcriptions", (1, 4)),
    ],
)
def test_each_task_has_one_bounded_plan(task, route, levels):
    plan = p.plan_for(task)
    assert plan.route == route
    assert tuple(level.concurrency for level in plan.levels) == levels
    for level in plan.levels:
        assert level.concurrency <= level.max_requests <= 128
        assert 0 < level.max_seconds <= 20
    # The whole run, setup and grace included, is bounded: the credential's lifetime.
    assert plan.max_requests == sum(level.max_requests for level in plan.levels)
    assert plan.max_seconds <= 5 * 60


@pytest.mark.parametrize("task", [None, "rerank", "", "CHAT"])
def test_a_task_without_a_plan_is_refused_naming_what_is_accepted(task):
    with pytest.raises(p.NoPlan) as refused:
        p.plan_for(task)
    assert str(refused.value).startswith("task: ")
    assert "chat" in str(refused.value) and "embeddings" in str(refused.value)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([7.0], 50, 7.0),
        ([7.0], 95, 7.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order does not matter
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
        (list(range(1, 101)), 95, 95.05),  # numpy's linear interpolation
        ([10.0, 20.0], 95, 19.5),
    ],
)
def test_percentile(values, q, expected):
    got = percentile(values, q)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_refuses_q_outside_0_to_100(q):
    with pytest.raises(ValueError, match="accepts 0 to 100"):
        percentile([1.0], q)


def test_a_levels_figures_count_errors_apart_and_take_percentiles_of_successes():
    samples = [
        Sample(ok=True, latency=1.0, ttft=0.1, gaps=[0.01, 0.03], output_tokens=3),
        Sample(ok=True, latency=2.0, ttft=0.3, gaps=[0.02], output_tokens=2),
        Sample(ok=False, latency=9.0, ttft=None, error="status 502"),
    ]
    figures = summarise(4, samples, seconds=2.0, streams=True)
    assert (figures.concurrency, figures.requests, figures.errors) == (4, 3, 1)
    assert figures.output_tokens == 5
    assert figures.output_tokens_per_second == pytest.approx(2.5)
    assert figures.requests_per_second == pytest.approx(1.0)
    assert figures.ttft_p50_ms == pytest.approx(200.0)
    assert figures.itl_p50_ms == pytest.approx(20.0)
    assert figures.latency_p95_ms == pytest.approx(1950.0)  # the failed 9 s is not in it


def test_a_level_without_streams_has_no_token_rate_and_no_ttft():
    figures = summarise(1, [Sample(ok=True, latency=0.5)], seconds=1.0, streams=False)
    assert figures.output_tokens_per_second is None
    assert figures.ttft_p50_ms is None and figures.itl_p95_ms is None
    assert figures.latency_p50_ms == pytest.approx(500.0)


def test_a_level_of_failures_only_has_no_percentiles():
    figures = summarise(16, [Sample(ok=False, latency=1.0)] * 3, seconds=1.0, streams=True)
    assert (figures.requests, figures.errors, figures.output_tokens) == (3, 3, 0)
    assert figures.ttft_p95_ms is None and figures.latency_p95_ms is None


def test_prompts_are_the_same_per_index_and_differ_between_requests():
    assert prompts.prompt_text(3, 50) == prompts.prompt_text(3, 50)
    assert prompts.prompt_text(3, 50) != prompts.prompt_text(4, 50)
    assert len(prompts.prompt_text(3, 50).split()) == 51  # "Request 3:" and 49 words


@pytest.mark.parametrize(
    ("target", "words", "counted", "expected"),
    [(128, 100, 128, 100), (128, 100, 200, 64), (128, 100, 64, 200), (128, 10, 0, 20)],
)
def test_the_next_guess_scales_the_words_to_the_target(target, words, counted, expected):
    assert prompts.next_guess(target, words, counted) == expected


def test_the_estimate_is_four_bytes_a_token():
    words = prompts.estimated_words(128)
    assert abs(len(prompts.prompt_text(0, words)) - 128 * 4) < 128 * 4 * 0.2


def test_the_tone_is_a_mono_16_bit_wav_of_the_seconds_asked():
    data = prompts.wav_tone(2, rate=8000)
    with wave.open(io.BytesIO(data)) as handle:
        assert handle.getnchannels() == 1 and handle.getsampwidth() == 2
        assert handle.getnframes() == 2 * 8000
