"""Cost on the overview: replica time recorded as ready replicas change and split by UTC day
(pure arithmetic in jobs/usage/cost.py), priced from the profile's machine catalog (hourlyPrice,
set by admins on the profile form and validated), shown per day, per 1,000 tokens and per API
key."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.urls import reverse

from accesspolicies.models import APIKey
from jobs.backends.base import Observed
from jobs.lifecycle import record_status
from jobs.models import Application, Cluster, Profile, ReplicaDay, UsageMinute
from jobs.usage import cost
from jobs.usage.replica_time import replica_seconds_per_day, replicas_changed

GPU_MANIFEST = {
    "spec": {
        "namespace": "ml",
        "source": {
            "model": {
                "uri": "hf://Qwen/Qwen2.5-7B-Instruct",
                "resources": {"accelerator": {"gpu": {"model": "l4", "countPerReplica": 2}}},
            }
        },
    }
}
CPU_MANIFEST = {"spec": {"source": {"model": {"uri": "hf://x/y", "resources": {"cpu": "500m"}}}}}
CATALOG = [
    {"name": "l4", "gpuMemory": "23034Mi", "gpusPerNode": 8, "hourlyPrice": 0.8},
    {"name": "cpu", "gpusPerNode": 0, "hourlyPrice": 0.05},
]


def at(text: str) -> datetime:
    return datetime.fromisoformat(f"2026-12-{text}+00:00")


# --- pure -----------------------------------------------------------------------------------


def test_a_span_is_split_at_utc_midnight():
    assert cost.split_by_day(at("01T23:30:00"), at("03T00:15:00")) == [
        (date(2026, 12, 1), 1800.0),
        (date(2026, 12, 2), 86400.0),
        (date(2026, 12, 3), 900.0),
    ]
    assert cost.split_by_day(at("01T10:00:00"), at("01T10:00:00")) == []


@pytest.mark.parametrize(
    "manifest, catalog, expected",
    [
        (GPU_MANIFEST, CATALOG, cost.Unit("l4", "GPU", 2.0, 0.8)),
        (CPU_MANIFEST, CATALOG, cost.Unit("cpu", "CPU", 0.5, 0.05)),
        (GPU_MANIFEST, [{"name": "l4", "gpuMemory": "1Gi"}], cost.Unit("l4", "GPU", 2.0, None)),
        (CPU_MANIFEST, [], cost.Unit("", "CPU", 0.5, None)),
    ],
    ids=["gpu-priced", "cpu-priced", "gpu-unpriced", "no-catalog"],
)
def test_the_unit_and_its_price(manifest, catalog, expected):
    assert cost.unit_of(manifest, catalog) == expected


def test_cost_per_day_per_thousand_tokens_and_per_key():
    unit = cost.Unit("l4", "GPU", 2.0, 0.8)
    days = cost.per_day({date(2026, 12, 1): 3600 * 3, date(2026, 12, 2): 1800}, unit)
    assert [(d.day.day, d.replica_hours, d.unit_hours) for d in days] == [(2, 0.5, 1.0), (1, 3, 6)]
    assert [round(d.cost, 6) for d in days] == [0.8, 4.8]
    total = cost.total_cost(days)
    assert round(total, 6) == 5.6
    assert round(cost.per_thousand_tokens(total, 28_000), 6) == 0.2
    assert cost.per_thousand_tokens(total, 0) is None
    keys = [{"tokens": 3000, "requests": 1}, {"tokens": 1000, "requests": 9}]
    assert cost.share_per_key(4.0, keys) == [3.0, 1.0]
    assert cost.share_per_key(
        4.0, [{"tokens": 0, "requests": 1}, {"tokens": 0, "requests": 3}]
    ) == [
        1.0,
        3.0,
    ]
    assert cost.share_per_key(None, keys) == [None, None]
    unpriced = cost.per_day({date(2026, 12, 1): 3600}, cost.Unit("l4", "GPU", 1.0, None))
    assert unpriced[0].cost is None and cost.total_cost(unpriced) is None


@pytest.mark.parametrize(
    "value, problem",
    [(2.5, None), (0, None), (-1, "out of range"), (10**9, "out of range"), ("2", "not a number"),
     (True, "not a number")],
)  # fmt: skip
def test_price_problems(value, problem):
    got = cost.price_problem(value)
    assert (got is None) if problem is None else (problem in got)


def test_discovery_keeps_the_prices_admins_set():
    old = [{"name": "cpu", "gpusPerNode": 0, "hourlyPrice": 0.05}]
    new = [{"name": "cpu", "gpusPerNode": 0, "nodeCpu": "4"}, {"name": "l4", "gpuMemory": "1Gi"}]
    assert cost.keep_prices(old, new) == [
        {"name": "cpu", "gpusPerNode": 0, "nodeCpu": "4", "hourlyPrice": 0.05},
        {"name": "l4", "gpuMemory": "1Gi"},
    ]


# --- replica time -----------------------------------------------------------------------------


@pytest.fixture
def gpu_app(org):
    cluster = Cluster.objects.create(organization=org, name="gpu", backend="kubernetes")
    profile = Profile.objects.create(
        organization=org, name="gpu", cluster=cluster, namespace="ml", machine_catalog=CATALOG
    )
    return Application.objects.create(
        organization=org, name="qwen", profile=profile, manifest=GPU_MANIFEST
    )


def test_replica_time_is_closed_when_the_count_changes(gpu_app):
    replicas_changed(gpu_app, 2, at("01T23:00:00"))
    replicas_changed(gpu_app, 1, at("02T01:00:00"))  # 2 replicas for 2 h across midnight
    replicas_changed(gpu_app, 0, at("02T02:30:00"))  # then 1 for 1.5 h
    assert dict(ReplicaDay.objects.values_list("day", "replica_seconds")) == {
        date(2026, 12, 1): 7200.0,
        date(2026, 12, 2): 7200.0 + 5400.0,
    }
    replicas_changed(gpu_app, 3, at("02T03:00:00"))
    # the open span counts when read
    got = replica_seconds_per_day(gpu_app, at("02T03:10:00"))
    assert got[date(2026, 12, 2)] == 12600.0 + 3 * 600


def test_record_status_records_replica_time(gpu_app):
    record_status(gpu_app, Observed(phase="Running", ready_replicas=1, desired_replicas=1))
    clock = gpu_app.replica_clock
    assert clock.ready == 1
    record_status(gpu_app, Observed(phase="Failed", ready_replicas=0, desired_replicas=1))
    assert ReplicaDay.objects.filter(application=gpu_app).count() == 1


def test_the_page_shows_cost_per_day_per_thousand_tokens_and_per_key(
    as_admin, as_viewer, org, gpu_app
):
    now = datetime.now(UTC)
    replicas_changed(gpu_app, 1, now - timedelta(hours=2))
    replicas_changed(gpu_app, 1, now - timedelta(hours=1))  # one replica for the last 2 hours
    key = APIKey.objects.create(organization=org, name="support-bot", lookup="sb", secret_hash="0")
    UsageMinute.objects.create(
        minute=now.replace(second=0, microsecond=0),
        scope="s",
        organization=org,
        application=gpu_app,
        api_key=key,
        requests=4,
        prompt_tokens=3000,
        completion_tokens=1000,
    )
    html = as_admin.get(reverse("jobs:application-detail", args=["qwen"])).content.decode()
    assert "Billed in GPU-hours: 2 GPU per replica on l4, at 0.8 an hour each." in html
    # 2 h x 2 GPUs x 0.8 = 3.20, over 4,000 tokens = 0.8 per 1,000
    assert "<dt>Last 7 days</dt><dd>3.20</dd>" in html
    assert "<dd>0.800" in html  # the open span grows by microseconds between the reads
    assert "<td>support-bot</td><td>4</td><td>4000</td><td>3.20</td>" in html
    # The cost per key is an admin's (key names and their usage); a viewer sees the totals.
    html = as_viewer.get(reverse("jobs:application-detail", args=["qwen"])).content.decode()
    assert "<dt>Last 7 days</dt><dd>3.20</dd>" in html and "support-bot" not in html


def test_an_unpriced_machine_says_who_sets_the_price(as_viewer, org, gpu_app):
    gpu_app.profile.machine_catalog = [{"name": "l4", "gpuMemory": "23034Mi"}]
    gpu_app.profile.save()
    html = as_viewer.get(reverse("jobs:application-detail", args=["qwen"])).content.decode()
    assert "No hourly price is set for l4: an admin sets <code>hourlyPrice</code>" in html


# --- the price, on the profile form -------------------------------------------------------------


def post_catalog(client, profile, catalog: str):
    return client.post(
        reverse("jobs:profile-edit", args=[profile.name]),
        {
            "name": profile.name,
            "cluster": profile.cluster.pk,
            "namespace": "ml",
            "vllm_version": "0.13.0",
            "machine_catalog_yaml": catalog,
            "defaults_yaml": "",
        },
    )


def test_admins_set_a_price_and_a_bad_one_is_named(as_admin, gpu_app):
    profile = gpu_app.profile
    good = "- name: l4\n  gpuMemory: 23034Mi\n  hourlyPrice: 1.25\n"
    assert post_catalog(as_admin, profile, good).status_code == 302
    profile.refresh_from_db()
    assert profile.machine_catalog[0]["hourlyPrice"] == 1.25
    bad = post_catalog(as_admin, profile, "- name: l4\n  gpuMemory: 23034Mi\n  hourlyPrice: -3\n")
    assert bad.status_code == 200
    assert "l4.hourlyPrice: -3 is out of range; accepted 0 to 100000 per hour." in (
        bad.content.decode()
    )
    text = post_catalog(as_admin, profile, "- name: l4\n  gpuMemory: 1Gi\n  hourlyPrice: cheap\n")
    assert "l4.hourlyPrice: &#x27;cheap&#x27; is not a number" in text.content.decode()


def test_only_admins_set_prices(as_deployer, as_viewer, gpu_app):
    catalog = "- name: l4\n  gpuMemory: 23034Mi\n  hourlyPrice: 0\n"
    for client in (as_deployer, as_viewer):
        assert post_catalog(client, gpu_app.profile, catalog).status_code == 403
    gpu_app.profile.refresh_from_db()
    assert gpu_app.profile.machine_catalog[0]["hourlyPrice"] == 0.8


def test_the_serving_facts_come_from_the_filled_manifest(as_viewer, gpu_app):
    gpu_app.manifest["spec"]["source"]["model"]["serving"] = {"maxContextTokens": 32768}
    gpu_app.manifest["spec"]["source"]["model"]["scaling"] = {"minReplicas": 1, "maxReplicas": 3}
    gpu_app.ready_replicas, gpu_app.desired_replicas = 1, 1
    gpu_app.save()
    html = as_viewer.get(reverse("jobs:application-detail", args=["qwen"])).content.decode()
    start = html.index('id="serving-facts-h"')
    facts = html[start : html.index("</section>", start)]
    for said in (
        "<dt>GPU</dt><dd>2 × l4 per replica</dd>",
        "<dt>Context window</dt><dd>32,768 tokens</dd>",
        "<dt>Replicas</dt><dd>1 ready of 1 (asks for 1 to 3)</dd>",
        "<dt>Cluster</dt><dd>gpu (Kubernetes)</dd>",
        "<dt>Profile</dt><dd>gpu (namespace ml)</dd>",
        "the cluster&#x27;s serving runtime image",
    ):
        assert said in facts, said
