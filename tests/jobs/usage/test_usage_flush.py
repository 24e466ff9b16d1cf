"""Flushes into UsageMinute: counts and histograms land in their rows, later flushes add to them
(one upsert per flush, no read-modify-write), unresolved requests have their own row, and the
usage report reads p50/p95 from the merged histograms."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accesspolicies.models import APIKey
from jobs.gateway.metering import Meter, RequestRecord
from jobs.models import Application, UsageMinute
from jobs.usage import store as usage_store
from jobs.usage.readers import report

NOW = datetime(2026, 12, 1, 10, 30, 20, tzinfo=UTC)
MINUTE = NOW.replace(second=0)


def make_application(org, name="chat"):
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}
    )


def make_key(org, name="support-bot"):
    return APIKey.objects.create(
        organization=org, name=name, lookup=name[:12], secret_hash="0" * 64
    )


def rec(app=None, key=None, org=None, at=NOW, **fields):
    fields.setdefault("status", 200)
    fields.setdefault("latency_ms", 10.0)
    return RequestRecord(
        at=at.timestamp(),
        organization_id=org.pk if org else None,
        application_id=app.pk if app else None,
        api_key_id=key.pk if key else None,
        **fields,
    )


@pytest.fixture
def meter():
    return Meter(announce=False)


def test_a_flush_writes_one_row_per_application_key_and_minute(db, org, meter):
    app, key = make_application(org), make_key(org)
    meter.record(rec(app, key, org, prompt_tokens=3, completion_tokens=4, latency_ms=20))
    meter.record(rec(app, key, org, status=503, latency_ms=400))
    meter.record(rec(app, None, org, status=429, latency_ms=0.5))
    meter.record(rec(status=401, latency_ms=0.2))  # neither key nor model resolved
    assert meter.flush()

    by_scope = {row.scope: row for row in UsageMinute.objects.all()}
    assert set(by_scope) == {
        f"o{org.pk}.a{app.pk}.k{key.pk}",
        f"o{org.pk}.a{app.pk}.k-",
        "o-.a-.k-",
    }
    keyed = by_scope[f"o{org.pk}.a{app.pk}.k{key.pk}"]
    assert keyed.minute == MINUTE
    assert (keyed.organization, keyed.application, keyed.api_key) == (org, app, key)
    assert (keyed.requests, keyed.errors_5xx, keyed.errors_4xx) == (2, 1, 0)
    assert (keyed.prompt_tokens, keyed.completion_tokens) == (3, 4)
    assert keyed.latency_ms_sum == 420
    assert (keyed.latency_le_25ms, keyed.latency_le_500ms, keyed.latency_le_1ms) == (1, 1, 0)
    assert by_scope[f"o{org.pk}.a{app.pk}.k-"].errors_4xx == 1
    unresolved = by_scope["o-.a-.k-"]
    assert unresolved.application is None and unresolved.errors_4xx == 1
    assert unresolved.latency_le_1ms == 1
    assert sum(row.requests for row in by_scope.values()) == 4


def test_later_flushes_add_to_the_minutes_rows(db, org, meter):
    app, key = make_application(org), make_key(org)
    for _ in range(3):
        meter.record(rec(app, key, org, stream=True, ttft_ms=8.0, latency_ms=30.0))
        meter.record(rec(status=401))
        assert meter.flush()
    meter.record(rec(app, key, org, at=NOW + timedelta(minutes=1), failed_in_stream=True))
    assert meter.flush()

    keyed = UsageMinute.objects.filter(api_key=key).order_by("minute")
    assert [(r.minute, r.requests, r.errors_in_stream) for r in keyed] == [
        (MINUTE, 3, 0),
        (MINUTE + timedelta(minutes=1), 1, 1),
    ]
    first = keyed[0]
    assert (first.streams, first.ttft_count, first.ttft_ms_sum, first.latency_le_50ms) == (
        3,
        3,
        24.0,
        3,
    )
    assert (first.ttft_le_10ms, first.ttft_le_5ms) == (3, 0)
    assert UsageMinute.objects.get(scope="o-.a-.k-").requests == 3


def test_a_flush_is_few_statements_in_one_transaction(db, org, meter):
    """One per 500 rows (SQLite), one in all (PostgreSQL); no reads."""
    apps = [make_application(org, f"app-{n}") for n in range(3)]
    for minute in range(350):  # 3 x 350 = 1,050 rows: three statements
        for app in apps:
            meter.record(rec(app, None, org, at=NOW - timedelta(minutes=minute)))
    with CaptureQueriesContext(connection) as queries:
        assert meter.flush()
    statements = [q["sql"] for q in queries.captured_queries]
    upserts = [s for s in statements if "ON CONFLICT" in s]
    assert len(upserts) == (1 if connection.vendor == "postgresql" else 3), statements
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert all("jobs_usageminute" not in s for s in reads)  # no read-modify-write
    assert len(reads) == 1 and '"jobs_application"' in reads[0]  # names for /metrics, once
    assert UsageMinute.objects.count() == 1050
    for app in apps:
        meter.record(rec(app, None, org, at=NOW - timedelta(minutes=349)))
    assert meter.flush()
    assert (
        UsageMinute.objects.filter(minute=MINUTE - timedelta(minutes=349), requests=2).count() == 3
    )


def test_requests_of_a_deleted_application_are_still_written(db, org, meter):
    """A flush racing a delete must not fail (and then keep retrying) the whole batch."""
    app, other = make_application(org), make_application(org, "other")
    meter.record(rec(app, None, org))
    meter.record(rec(other, None, org))
    app.delete()
    assert meter.flush()
    assert UsageMinute.objects.filter(application=other).get().requests == 1
    assert UsageMinute.objects.count() == 2


def test_scope_spells_missing_ids():
    assert usage_store.scope_of(None, None, None) == "o-.a-.k-"
    assert usage_store.scope_of(1, 22, None) == "o1.a22.k-"
    assert usage_store.scope_of(1, 22, 333) == "o1.a22.k333"
    assert usage_store.scope_of(1, 22, 333, 4, "a" * 63) == "o1.a22.k333.r4.m" + "a" * 63


def test_a_lora_adapters_requests_are_a_row_of_their_own(db, org, meter):
    app, key = make_application(org), make_key(org)
    meter.record(rec(app, key, org, prompt_tokens=3))
    meter.record(rec(app, key, org, prompt_tokens=5, adapter="support"))
    meter.record(rec(app, key, org, prompt_tokens=7, adapter="support"))
    assert meter.flush()
    rows = UsageMinute.objects.filter(application=app).order_by("adapter")
    assert [(r.adapter, r.requests, r.prompt_tokens) for r in rows] == [
        ("", 1, 3),
        ("support", 2, 12),
    ]
    meter.record(rec(app, key, org, prompt_tokens=1, adapter="support"))
    assert meter.flush()  # added to the adapter's row, as any other row's
    assert UsageMinute.objects.get(application=app, adapter="support").requests == 3


def test_report_sums_keys_per_minute_zero_fills_and_reads_p50_p95(db, org, meter):
    app, key, other_key = make_application(org), make_key(org), make_key(org, "batch-job")
    earlier = NOW - timedelta(minutes=2)
    for _ in range(90):
        meter.record(rec(app, key, org, latency_ms=8.0, prompt_tokens=2, completion_tokens=1))
    for _ in range(10):
        meter.record(rec(app, other_key, org, latency_ms=800.0, status=502))
    meter.record(rec(app, key, org, at=earlier, latency_ms=1.5, status=404))
    meter.flush()

    got = report(UsageMinute.objects.filter(application=app), minutes=5, now=NOW)
    assert got["from"] == MINUTE - timedelta(minutes=4)
    assert got["to"] == MINUTE + timedelta(minutes=1)
    assert [row["minute"] for row in got["rows"]] == [
        MINUTE - timedelta(minutes=m) for m in (4, 3, 2, 1, 0)
    ]
    assert [row["requests"] for row in got["rows"]] == [0, 0, 1, 0, 100]
    current = got["rows"][-1]
    assert (current["errors_5xx"], current["errors_4xx"]) == (10, 0)
    assert (current["prompt_tokens"], current["completion_tokens"]) == (180, 90)
    # 90 in (5, 10] and 10 in (500, 1000]: p50 in the first bucket, p95 halfway in the second
    assert current["latency_p50_ms"] == pytest.approx(5 + 5 * 50 / 90, abs=0.001)
    assert current["latency_p95_ms"] == pytest.approx(750.0)
    assert got["rows"][0]["latency_p50_ms"] is None
    totals = got["totals"]
    assert (totals["requests"], totals["errors_4xx"], totals["errors_5xx"]) == (101, 1, 10)
    # the span's p50 comes from the merged histogram (101 requests), not from row medians
    assert totals["latency_p50_ms"] == pytest.approx(5 + 5 * (50.5 - 1) / 90, abs=0.001)

    per_key = report(UsageMinute.objects.filter(api_key=key), minutes=5, now=NOW)
    assert per_key["totals"]["requests"] == 91


def test_report_refuses_spans_out_of_bounds(db):
    with pytest.raises(ValueError, match="accepts 1 to 1440"):
        report(UsageMinute.objects.all(), minutes=0)


def test_metrics_learn_application_names_at_flush(db, org, meter):
    app = make_application(org, "chat")
    meter.record(rec(app, None, org, route="/v1/chat/completions"))
    assert [name for name, *_ in meter.totals()] == [f"#{app.pk}"]  # before its first flush
    assert meter.flush()
    assert [name for name, *_ in meter.totals()] == ["chat"]
