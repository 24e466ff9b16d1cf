"""The overview's chart data: GET /models/<name>/charts/?window= (and the REST API's
/api/v1/applications/<name>/charts): every bucket of 1 hour, 24 hours or 7 days, summed from
the per-minute rows; usage per API key; members of the organisation only; a bad window named;
a fixed number of queries however many rows there are."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accesspolicies.models import APIKey
from jobs.models import Application, UsageMinute
from jobs.usage.charts import WINDOWS, chart_point, span

URL = "/models/chat/charts/"


def make_application(org, name="chat"):
    return Application.objects.create(
        organization=org, name=name, profile=org.profiles.get(), manifest={"spec": {}}
    )


def make_key(org, name):
    return APIKey.objects.create(
        organization=org, name=name, lookup=name[:12], secret_hash="0" * 64
    )


def row(app, key, minute, **counts):
    counts = {"requests": 1, "latency_le_10ms": counts.get("requests", 1)} | counts
    return UsageMinute(
        minute=minute,
        scope=f"{app.organization_id}:{app.pk}:{key.pk if key else '-'}",
        organization_id=app.organization_id,
        application=app,
        api_key=key,
        **counts,
    )


def minutes_ago(n: int) -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=n)


@pytest.fixture
def traffic(org):
    """chat: 10 requests now by support-bot (2 of them 5xx), 3 by batch-job 3 hours ago, 4
    six days ago by support-bot; embed (another application): 100 now."""
    chat, embed = make_application(org), make_application(org, "embed")
    bot, batch = make_key(org, "support-bot"), make_key(org, "batch-job")
    UsageMinute.objects.bulk_create(
        [
            row(chat, bot, minutes_ago(0), requests=10, errors_5xx=2, completion_tokens=600),
            row(chat, batch, minutes_ago(180), requests=3, errors_4xx=1, prompt_tokens=30),
            row(chat, bot, minutes_ago(6 * 24 * 60), requests=4),
            row(embed, bot, minutes_ago(0), requests=100),
        ]
    )
    return chat


def total(points, field="requests"):
    return sum(p[field] for p in points)


def test_each_window_has_its_buckets_and_sums_its_rows(as_viewer, traffic):
    for name, buckets, step, requests in (
        ("1h", 60, 60, 10),
        ("24h", 288, 300, 13),
        ("7d", 168, 3600, 17),
    ):
        body = as_viewer.get(URL, {"window": name}).json()
        assert body["window"] == name and body["stepSeconds"] == step
        assert len(body["points"]) == buckets, name
        assert total(body["points"]) == requests, name  # embed's 100 are not chat's
        times = [datetime.fromisoformat(p["t"]) for p in body["points"]]
        assert all(b - a == timedelta(seconds=step) for a, b in zip(times, times[1:], strict=False))
    last = as_viewer.get(URL, {"window": "1h"}).json()["points"][-1]
    assert (last["s2xx"], last["s4xx"], last["s5xx"]) == (8, 0, 2)
    assert last["tokensPerSecond"] == 10.0 and last["p50"] is not None


def test_the_default_window_is_an_hour(as_viewer, traffic):
    assert as_viewer.get(URL).json()["window"] == "1h"


def test_usage_per_key_over_the_window(as_admin, traffic):
    keys = as_admin.get(URL, {"window": "24h"}).json()["keys"]
    assert [(k["key"], k["requests"], k["errors"], k["tokens"]) for k in keys] == [
        ("support-bot", 10, 2, 600),
        ("batch-job", 3, 1, 30),
    ]
    keys = as_admin.get(URL, {"window": "7d"}).json()["keys"]
    assert [(k["key"], k["requests"]) for k in keys] == [("support-bot", 14), ("batch-job", 3)]


@pytest.mark.parametrize("member", ["as_viewer", "as_deployer"])
def test_usage_per_key_is_an_admins(member, request, as_admin, traffic):
    """Security review, finding 2: key names and their usage are an admin's (as on
    /api/v1/keys/<name>/usage), on the chart data, the REST API and the overview page."""
    client = request.getfixturevalue(member)
    for url in (URL, "/api/v1/applications/chat/charts"):
        data = client.get(url, {"window": "7d"}).json()
        assert "keys" not in data and sum(p["requests"] for p in data["points"]) == 17
        assert "support-bot" not in str(data)
        assert [k["key"] for k in as_admin.get(url, {"window": "7d"}).json()["keys"]] == [
            "support-bot",
            "batch-job",
        ]


@pytest.mark.parametrize("member", ["as_viewer", "as_deployer"])
def test_the_overview_page_shows_usage_per_key_to_admins_only(
    member, request, as_admin, org, deployer
):
    """Finding 2 on the overview page: its per-key chart and cost per key table."""
    from jobs import deploy as verbs
    from tests.helpers import SHORTEST

    app = verbs.apply(SHORTEST.replace("spec:\n", "spec:\n  syncType: Manual\n"), deployer)
    key = make_key(org, "support-bot")
    UsageMinute.objects.bulk_create([row(app.application, key, minutes_ago(0), requests=4)])
    page = request.getfixturevalue(member).get("/models/bge-embed/").content.decode()
    assert "support-bot" not in page
    assert "Usage per API key" not in page and "Cost per API key" not in page
    admins = as_admin.get("/models/bge-embed/").content.decode()
    assert "support-bot" in admins
    assert "Usage per API key" in admins and "Cost per API key" in admins


def test_a_bad_window_is_named_with_what_is_accepted(as_viewer, traffic):
    response = as_viewer.get(URL, {"window": "30d"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "window" in message and "'30d'" in message and "1h, 24h, 7d" in message


def test_outsiders_get_404_and_anonymous_logs_in(as_outsider, client, traffic):
    assert as_outsider.get(URL).status_code == 404
    assert client.get(URL).status_code == 302


def test_the_rest_api_answers_the_same(as_admin, traffic):
    page = as_admin.get(URL, {"window": "24h"}).json()
    api = as_admin.get("/api/v1/applications/chat/charts", {"window": "24h"})
    assert api.status_code == 200, api.content
    assert api.json()["points"] == page["points"] and api.json()["keys"] == page["keys"]
    refused = as_admin.get("/api/v1/applications/chat/charts", {"window": "1y"})
    assert refused.status_code == 400
    assert "'1y'" in refused.json()["error"]["message"]


def test_a_point_is_one_shape():
    start = datetime(2026, 12, 1, 15, 4, tzinfo=UTC)
    point = chart_point(start, {"requests": 6, "errors_4xx": 1, "completion_tokens": 120}, 60)
    assert point == {
        "t": "2026-12-01T15:04:00+00:00", "seconds": 60, "requests": 6, "s2xx": 5, "s4xx": 1,
        "s5xx": 0, "streamErrors": 0, "p50": None, "p95": None, "tokensPerSecond": 2.0,
        "promptTokens": 0, "completionTokens": 120,
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, now, first, last",
    [
        ("1h", "15:04:31", "14:05", "15:04"),
        ("24h", "15:04:31", "15:05", "15:00"),  # the day before, 5-minute buckets
        ("7d", "15:04:31", "16:00", "15:00"),
    ],
)
def test_buckets_are_aligned_to_their_step(name, now, first, last):
    moment = datetime.fromisoformat(f"2026-12-01T{now}+00:00")
    got_first, got_last = span(WINDOWS[name], moment)
    assert got_first.strftime("%H:%M") == first and got_last.strftime("%H:%M") == last
    assert (got_last - got_first) == timedelta(minutes=WINDOWS[name].minutes - WINDOWS[name].step)


@pytest.mark.parametrize("window", ["1h", "24h", "7d"])
def test_query_count_is_fixed_as_rows_grow(as_viewer, org, window):
    app, key = make_application(org), make_key(org, "k")
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(0))])

    def count() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert as_viewer.get(URL, {"window": window}).status_code == 200
        return len(seen)

    few = count()
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(n)) for n in range(1, 3000, 7)])
    others = [make_key(org, f"k{i}") for i in range(5)]
    UsageMinute.objects.bulk_create([row(app, k, minutes_ago(3)) for k in others])
    assert count() == few  # settled buckets from the cache
    cache.clear()
    assert count() == few  # every bucket read again


def test_settled_buckets_come_from_the_cache_and_open_ones_are_read(as_viewer, org):
    app, key = make_application(org), make_key(org, "k")
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(30)), row(app, key, minutes_ago(0))])
    assert total(as_viewer.get(URL).json()["points"]) == 2
    # a row the meter would never write late: unseen until the cache lets the bucket go
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(40), requests=5)])
    UsageMinute.objects.filter(minute=minutes_ago(0)).update(requests=3)
    assert total(as_viewer.get(URL).json()["points"]) == 1 + 3
    cache.clear()
    assert total(as_viewer.get(URL).json()["points"]) == 1 + 3 + 5


def test_the_rest_api_takes_a_token(viewer, client, traffic):
    from tests.helpers import bearer

    response = client.get("/api/v1/applications/chat/charts?window=7d", **bearer(viewer))
    assert response.status_code == 200
    assert sum(p["requests"] for p in response.json()["points"]) == 17
    assert client.get("/api/v1/applications/chat/charts").status_code == 401


def test_the_overview_page_keeps_its_query_count_as_data_grows(as_viewer, org, deployer):
    from jobs import deploy as verbs
    from jobs.usage.replica_time import replicas_changed
    from tests.helpers import SHORTEST

    app = verbs.apply(SHORTEST.replace("spec:\n", "spec:\n  syncType: Manual\n"), deployer)
    app = app.application
    key = make_key(org, "k")
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(0))])

    def count() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert as_viewer.get("/models/bge-embed/").status_code == 200
        return len(seen)

    few = count()
    UsageMinute.objects.bulk_create([row(app, key, minutes_ago(n)) for n in range(1, 9000, 5)])
    others = [make_key(org, f"k{i}") for i in range(5)]
    UsageMinute.objects.bulk_create([row(app, k, minutes_ago(3)) for k in others])
    now = datetime.now(UTC)
    for day in range(10, 0, -1):
        replicas_changed(app, day % 3, now - timedelta(days=day))
    manual = SHORTEST.replace("spec:\n", "spec:\n  syncType: Manual\n")
    for n in range(3):
        verbs.apply(manual + f"      resources:\n        memory: {n + 6}Gi\n", deployer)
    assert app.revisions.count() == 4
    cache.clear()
    assert count() == few
