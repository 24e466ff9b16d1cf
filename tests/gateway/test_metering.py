"""The meter in process: what each record adds to its row, the quantile math, exactly-once
counting while threads record and a flusher writes, failed flushes kept (bounded)."""

import math
import threading

import pytest

from jobs.gateway.metering import MAX_TOKENS_PER_REQUEST, Meter, RequestRecord
from jobs.usage import counters as c
from jobs.usage.histogram import BUCKET_COUNT, LATENCY_BUCKET_FIELDS, bucket_index, quantile

AT = 1_800_000_030.0  # 30 s into a minute
MINUTE = 1_800_000_000


def flushed(records, **meter_args):
    """Record everything, flush once through a capturing writer; the batch written."""
    batches = []
    meter = Meter(write=batches.append, announce=False, **meter_args)
    for rec in records:
        meter.record(rec)
    assert meter.flush() is True
    assert len(batches) <= 1
    return batches[0] if batches else {}


def named(counts):
    return dict(zip(c.COUNTER_FIELDS, counts, strict=True))


def only_row(records):
    batch = flushed(records)
    assert len(batch) == 1
    return named(next(iter(batch.values())))


def bucket(name):
    return LATENCY_BUCKET_FIELDS.index(name)


# --- what one record adds ----------------------------------------------------------------

CASES = [
    (
        "a plain 200",
        RequestRecord(at=AT, status=200, latency_ms=12.0, prompt_tokens=5, completion_tokens=7),
        {"requests": 1, "prompt_tokens": 5, "completion_tokens": 7, "latency_ms_sum": 12.0},
        "latency_le_25ms",
    ),
    (
        "a 401 (nothing resolved)",
        RequestRecord(at=AT, status=401, latency_ms=0.4),
        {"requests": 1, "errors_4xx": 1, "latency_ms_sum": 0.4},
        "latency_le_1ms",
    ),
    (
        "the client went away (499)",
        RequestRecord(at=AT, status=499, latency_ms=3000.0, stream=True, ttft_ms=40.0),
        {
            "requests": 1,
            "errors_4xx": 1,
            "latency_ms_sum": 3000.0,
            "streams": 1,
            "ttft_ms_sum": 40.0,
            "ttft_count": 1,
            "ttft_le_50ms": 1,  # its time to first token in the histogram the judge reads
        },
        "latency_le_5000ms",
    ),
    (
        "an upstream failure (502)",
        RequestRecord(at=AT, status=502, latency_ms=5.0),
        {"requests": 1, "errors_5xx": 1, "latency_ms_sum": 5.0},
        "latency_le_5ms",  # a bound itself belongs to its bucket (le)
    ),
    (
        "an error inside a 200 stream",
        RequestRecord(
            at=AT, status=200, latency_ms=80.0, stream=True, ttft_ms=9.5, failed_in_stream=True
        ),
        {
            "requests": 1,
            "errors_in_stream": 1,
            "latency_ms_sum": 80.0,
            "streams": 1,
            "ttft_ms_sum": 9.5,
            "ttft_count": 1,
            "ttft_le_10ms": 1,
        },
        "latency_le_100ms",
    ),
    (
        "a 5xx that also failed in its stream counts once, as 5xx",
        RequestRecord(at=AT, status=503, latency_ms=1.5, failed_in_stream=True),
        {"requests": 1, "errors_5xx": 1, "latency_ms_sum": 1.5},
        "latency_le_2_5ms",
    ),
    (
        "a stream that never sent a chunk has no time to first token",
        RequestRecord(at=AT, status=504, latency_ms=120000.0, stream=True),
        {"requests": 1, "errors_5xx": 1, "latency_ms_sum": 120000.0, "streams": 1},
        "latency_over_60000ms",
    ),
    (
        "a negative latency (clock step) counts as 0",
        RequestRecord(at=AT, status=200, latency_ms=-3.0),
        {"requests": 1},
        "latency_le_1ms",
    ),
    (
        "NaN latency counts as 0",
        RequestRecord(at=AT, status=200, latency_ms=math.nan),
        {"requests": 1},
        "latency_le_1ms",
    ),
    (
        "broken token figures: negative to 0, huge capped, text to 0",
        RequestRecord(
            at=AT, status=200, latency_ms=1.0, prompt_tokens=-4, completion_tokens=10**30
        ),
        {"requests": 1, "completion_tokens": MAX_TOKENS_PER_REQUEST, "latency_ms_sum": 1.0},
        "latency_le_1ms",
    ),
]


@pytest.mark.parametrize(
    ("rec", "expected", "bucket_name"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_one_record_adds_to_its_row(rec, expected, bucket_name):
    row = only_row([rec])
    buckets = {name: row.pop(name) for name in LATENCY_BUCKET_FIELDS}
    assert buckets == {name: int(name == bucket_name) for name in LATENCY_BUCKET_FIELDS}
    assert row == {name: expected.get(name, 0) for name in row}


def test_token_figures_that_are_not_numbers_count_as_zero():
    rec = RequestRecord(at=AT, status=200, latency_ms=1.0, prompt_tokens="many")
    assert only_row([rec])["prompt_tokens"] == 0


def test_rows_are_keyed_by_organisation_application_key_minute_and_revision():
    records = [
        RequestRecord(at=AT, status=200, latency_ms=1, organization_id=1, application_id=2),
        RequestRecord(
            at=AT, status=200, latency_ms=1, organization_id=1, application_id=2, api_key_id=3
        ),
        RequestRecord(
            at=AT + 20, status=200, latency_ms=1, organization_id=1, application_id=2, api_key_id=3
        ),
        RequestRecord(
            at=AT + 40, status=200, latency_ms=1, organization_id=1, application_id=2, api_key_id=3
        ),
        RequestRecord(at=AT, status=401, latency_ms=1),
    ]
    batch = flushed(records)
    assert {key: counts[c.REQUESTS] for key, counts in batch.items()} == {
        (1, 2, None, MINUTE, None): 1,
        (1, 2, 3, MINUTE, None): 2,
        (1, 2, 3, MINUTE + 60, None): 1,
        (None, None, None, MINUTE, None): 1,
    }


def test_nothing_pending_writes_nothing():
    assert flushed([]) == {}


# --- the quantile math -------------------------------------------------------------------


def histogram(**counts):
    return [counts.get(name, 0) for name in LATENCY_BUCKET_FIELDS]


@pytest.mark.parametrize(
    ("counts", "q", "expected"),
    [
        (histogram(), 0.5, None),
        # 10 in (10, 25]: the median is halfway through the bucket
        (histogram(latency_le_25ms=10), 0.5, 17.5),
        (histogram(latency_le_25ms=10), 0.95, 10 + 15 * 0.95),
        # the first bucket starts at 0
        (histogram(latency_le_1ms=4), 0.5, 0.5),
        # 90 fast, 10 slow: the median is fast, p95 is halfway into the slow bucket
        (histogram(latency_le_10ms=90, latency_le_1000ms=10), 0.5, 5 + 5 * 50 / 90),
        (histogram(latency_le_10ms=90, latency_le_1000ms=10), 0.95, 500 + 500 * 0.5),
        # the overflow bucket answers the last bound
        (histogram(latency_over_60000ms=3), 0.95, 60000.0),
        (histogram(latency_le_1ms=1, latency_over_60000ms=99), 0.5, 60000.0),
    ],
)
def test_quantile_interpolates_inside_the_bucket(counts, q, expected):
    got = quantile(counts, q)
    assert got == (None if expected is None else pytest.approx(expected))


def test_quantile_refuses_a_histogram_of_another_shape():
    with pytest.raises(ValueError, match=f"{BUCKET_COUNT} buckets"):
        quantile([1, 2, 3], 0.5)


@pytest.mark.parametrize(
    ("latency", "name"),
    [
        (0, "latency_le_1ms"),
        (1, "latency_le_1ms"),
        (1.0001, "latency_le_2_5ms"),
        (60000, "latency_le_60000ms"),
        (60000.5, "latency_over_60000ms"),
    ],
)
def test_bucket_bounds_are_inclusive(latency, name):
    assert LATENCY_BUCKET_FIELDS[bucket_index(latency)] == name


def test_merged_histograms_give_the_quantile_of_all_requests():
    """Two minutes merged by addition: p50 of the whole, not an average of medians."""
    first = histogram(latency_le_10ms=100)
    second = histogram(latency_le_1000ms=300)
    merged = [a + b for a, b in zip(first, second, strict=True)]
    assert quantile(merged, 0.5) == pytest.approx(500 + 500 * (200 - 100) / 300)


def test_figures_of_summed_counters():
    sums = named(list(c.COUNTER_FIELDS and [0] * c.WIDTH))
    sums.update(requests=4, latency_ms_sum=100.0, ttft_ms_sum=30.0, ttft_count=2)
    sums["latency_le_25ms"] = 4
    got = c.figures(sums)
    assert got["requests"] == 4 and got["latency_avg_ms"] == 25.0 and got["ttft_avg_ms"] == 15.0
    assert got["latency_p50_ms"] == 17.5
    empty = c.figures({})
    assert empty["requests"] == 0 and empty["latency_p95_ms"] is None
    assert empty["latency_avg_ms"] is None and empty["ttft_avg_ms"] is None


# --- exactly once ------------------------------------------------------------------------


def test_every_record_lands_in_exactly_one_flush_while_threads_record_and_one_flushes():
    written = {}
    lock = threading.Lock()

    def write(batch):
        with lock:
            for key, counts in batch.items():
                total = written.setdefault(key, [0] * c.WIDTH)
                c.add_into(total, counts)

    meter = Meter(write=write, announce=False)
    threads, per_thread, keys = 6, 20_000, 7
    go = threading.Barrier(threads + 1)
    done = threading.Event()
    flushes = []

    def recorder(number):
        go.wait()
        for i in range(per_thread):
            meter.record(
                RequestRecord(
                    at=AT,
                    status=200 if i % 10 else 500,
                    latency_ms=float(i % 50),
                    organization_id=1,
                    application_id=i % keys,
                    api_key_id=number,
                    prompt_tokens=1,
                )
            )

    def flusher():
        go.wait()
        while not done.is_set():
            flushes.append(meter.flush())

    workers = [threading.Thread(target=recorder, args=(n,)) for n in range(threads)]
    flushing = threading.Thread(target=flusher)
    for thread in [*workers, flushing]:
        thread.start()
    for thread in workers:
        thread.join()
    done.set()
    flushing.join()
    meter.flush()

    total = threads * per_thread
    assert len(flushes) > 1  # the flusher really ran while the threads recorded
    assert sum(row[c.REQUESTS] for row in written.values()) == total
    assert sum(row[c.PROMPT_TOKENS] for row in written.values()) == total
    assert sum(row[c.ERRORS_5XX] for row in written.values()) == total // 10
    assert sum(sum(row[c.FIRST_BUCKET :]) for row in written.values()) == total
    assert len(written) == threads * keys
    per_key = {key: row[c.REQUESTS] for key, row in written.items()}
    assert set(per_key.values()) <= {per_thread // keys, per_thread // keys + 1}
    totals = meter.totals()
    assert sum(counts[0] for *_, counts in totals) == total


# --- failed flushes ----------------------------------------------------------------------


class FlakyDatabase:
    """A writer that refuses the first `failures` batches, as a database that is down does."""

    def __init__(self, failures):
        self.failures = failures
        self.written = []

    def __call__(self, batch):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the database is down")
        self.written.append({key: list(counts) for key, counts in batch.items()})


def test_a_failed_flush_keeps_its_counts_for_the_next():
    database = FlakyDatabase(failures=2)
    meter = Meter(write=database, announce=False)
    rec = RequestRecord(at=AT, status=200, latency_ms=1, application_id=1)
    meter.record(rec)
    assert meter.flush() is False
    meter.record(rec)
    assert meter.flush() is False
    meter.record(rec)
    assert meter.flush() is True
    assert [{k: v[c.REQUESTS] for k, v in b.items()} for b in database.written] == [
        {(None, 1, None, MINUTE, None): 3}
    ]
    assert meter.failed_flushes == 2 and meter.flushes == 1 and meter.dropped_requests == 0


def test_what_a_down_database_leaves_pending_is_bounded_oldest_minutes_first():
    database = FlakyDatabase(failures=1)
    meter = Meter(write=database, announce=False, max_entries=3)
    now_minute = int(AT // 60) * 60
    for minutes_ago in (4, 3, 2, 1, 0):
        for _ in range(minutes_ago + 1):
            meter.record(RequestRecord(at=now_minute - 60 * minutes_ago, status=200, latency_ms=1))
    assert meter.flush() is False
    assert meter.pending_entries() == 3
    assert meter.dropped_requests == 5 + 4  # the two oldest minutes
    assert meter.flush() is True
    assert sorted(k[3] for k in database.written[0]) == [
        now_minute - 120,
        now_minute - 60,
        now_minute,
    ]


def test_counts_older_than_the_age_bound_are_dropped_when_a_flush_fails():
    database = FlakyDatabase(failures=1)
    meter = Meter(write=database, announce=False, max_age_seconds=3600)
    meter.record(RequestRecord(at=1000.0, status=200, latency_ms=1))  # 1970: far too old
    meter.record(RequestRecord(at=AT, status=200, latency_ms=1))
    assert meter.flush() is False
    assert meter.dropped_requests == 1 and meter.pending_entries() == 1


def test_start_is_idempotent_and_the_thread_flushes_on_its_own():
    database = FlakyDatabase(failures=0)
    meter = Meter(interval=0.05, write=database, announce=False)
    meter.start()
    thread = meter._thread
    meter.start()
    assert meter._thread is thread and thread.is_alive()
    meter.record(RequestRecord(at=AT, status=200, latency_ms=1))
    for _ in range(200):
        if database.written:
            break
        threading.Event().wait(0.05)
    meter.stop()
    assert not thread.is_alive()
    assert sum(v[c.REQUESTS] for b in database.written for v in b.values()) == 1
