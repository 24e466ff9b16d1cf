"""Time the model overview (GET /models/<name>/) and its chart data endpoint
(GET /models/<name>/charts/?window=1h|24h|7d) for an application with 1 hour and with 7 days of
per-minute usage rows (three API keys, so 3 rows a minute): median and p95 server time in ms,
CPU ms and the SQL queries of one request. Targets: the overview under 150 ms, the chart data
under 50 ms, with 7 days of data.

Uses a throwaway SQLite file (DATABASE_URL) and var folder, so it never touches a real database.
Each case is measured with the cache of settled buckets warm (as a page that is open sees it) and
cold (every bucket read from the rows).
Run: .venv/bin/python bench/overview_bench.py [N]   (N requests per case, default 50)
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta

from scratch import django_on_scratch, timed_gets  # noqa: E402

WORK = django_on_scratch("overview")

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from accesspolicies.models import APIKey, Membership, Organization, Role  # noqa: E402
from jobs.deploy import apply  # noqa: E402
from jobs.models import Cluster, Profile, UsageMinute  # noqa: E402
from jobs.usage.replica_time import replicas_changed  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402

MANIFEST = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: {name}
  profileName: local
  syncType: Manual
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""
SPANS = {"1 hour": 60, "7 days": 7 * 24 * 60}
KEYS = 3
PAGE_TARGET_MS, CHARTS_TARGET_MS = 150.0, 50.0


def application_with(membership, name: str, minutes: int):
    application = apply(MANIFEST.format(name=name), membership).application
    keys = [
        APIKey.objects.create(
            organization=membership.organization,
            name=f"{name}-key-{k}",
            lookup=f"{name[-1]}k{k}",
            secret_hash="0" * 64,
        )
        for k in range(KEYS)
    ]
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = [
        UsageMinute(
            minute=now - timedelta(minutes=m),
            scope=f"{application.pk}:{key.pk}",
            organization=membership.organization,
            application=application,
            api_key=key,
            requests=20 + m % 7,
            errors_4xx=m % 3,
            errors_5xx=m % 11 == 0,
            prompt_tokens=400,
            completion_tokens=900,
            latency_ms_sum=2000.0,
            latency_le_50ms=12,
            latency_le_250ms=8 + m % 7,
        )
        for m in range(minutes)
        for key in keys
    ]
    UsageMinute.objects.bulk_create(rows, batch_size=2000)
    replicas_changed(application, 1, now - timedelta(minutes=minutes))
    return application


def measure(client: Client, path: str, n: int, cold: bool = False) -> dict:
    return timed_gets(client, path, n, before_each=cache.clear if cold else None)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    call_command("migrate", verbosity=0)
    org = Organization.objects.create(slug="acme", name="Acme")
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    user = get_user_model().objects.create_user(username="ada")
    membership = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    with FakeHub().serve() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        names = {}
        for index, (label, minutes) in enumerate(SPANS.items()):
            names[label] = f"model-{index}"
            application_with(membership, names[label], minutes)
    client = Client()
    client.force_login(user)
    print(
        f"Model overview: {n} requests each through django.test.Client, SQLite file, "
        f"{KEYS} API keys (rows a minute); load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs before the run"
    )
    rows = {
        label: UsageMinute.objects.filter(application__name=names[label]).count() for label in SPANS
    }
    print(
        f"{'request':30}" + "".join(f" | {f'{label} ({rows[label]} rows)':^38}" for label in SPANS)
    )
    print(
        f"{'':30}" + f" | {'median ms':>9} {'p95 ms':>9} {'cpu ms':>8} {'queries':>8}" * len(SPANS)
    )
    cases = [
        ("GET overview page", "/models/{name}/", PAGE_TARGET_MS, False),
        ("GET overview page, cold cache", "/models/{name}/", PAGE_TARGET_MS, True),
    ]
    for w in ("1h", "24h", "7d"):
        path = "/models/{name}/charts/?window=" + w
        cases.append((f"GET charts window={w}", path, CHARTS_TARGET_MS, False))
        cases.append(("  the same, cold cache", path, CHARTS_TARGET_MS, True))
    verdicts = []
    for label, path, target, cold in cases:
        line = f"{label:30}"
        for span in SPANS:
            result = measure(client, path.format(name=names[span]), n, cold)
            line += (
                f" | {result['median']:9.1f} {result['p95']:9.1f} {result['cpu']:8.1f}"
                f" {result['queries']:8d}"
            )
            if span == "7 days" and not cold:
                verdicts.append((label, result["median"], target))
        print(line)
    for label, median, target in verdicts:
        verdict = "met" if median < target else "NOT met"
        print(
            f"Target for {label} with 7 days of data, median under {target:.0f} ms: {verdict} "
            f"({median:.1f} ms, {median / target:.2f} of the target)"
        )
    print(
        "Settled buckets (ended 2 minutes ago) are cached for an hour (jobs/usage/charts.py): a "
        "cold-cache request is the first after a deploy or an hour's expiry; the rows above "
        "say what it costs."
    )


if __name__ == "__main__":
    main()
