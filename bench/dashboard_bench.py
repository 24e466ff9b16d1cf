"""Time the Models dashboard (GET /) for an organisation with 10 and with 1000 applications:
median and p95 server time in milliseconds, and the SQL queries one request makes.

Uses a throwaway SQLite file (DATABASE_URL) and var folder, so it never touches a real database.
Run: .venv/bin/python bench/dashboard_bench.py [N]   (N requests per size, default 200)
Wall time suffers when other processes share the CPUs; the CPU-time column suffers less.
"""

from __future__ import annotations

import copy
import os
import sys
from datetime import timedelta

from scratch import django_on_scratch, timed_gets  # noqa: E402

WORK = django_on_scratch("dashboard")

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from accesspolicies.models import Membership, Organization, Role  # noqa: E402
from jobs.deploy import apply  # noqa: E402
from jobs.models import Application, Cluster, Phase, Profile  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402

SHORTEST = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bge-embed
  profileName: local
  syncType: Manual
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""
SIZES = (10, 1000)
TARGET_MS = 100.0


def organisation_with(count: int) -> Client:
    """An organisation with `count` applications (one applied, the rest bulk-created from its
    filled-in manifest) and a client logged in as its admin."""
    org = Organization.objects.create(slug=f"org-{count}", name=f"Org {count}")
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    user = get_user_model().objects.create_user(username=f"admin-{count}")
    membership = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    first = apply(SHORTEST, membership).application
    phases = [Phase.RUNNING, Phase.PENDING, Phase.FAILED, Phase.LOADING]
    now = timezone.now()
    rows = []
    for index in range(1, count):
        manifest = copy.deepcopy(first.manifest)
        manifest["spec"]["name"] = f"model-{index:04d}"
        rows.append(
            Application(
                organization=org,
                name=f"model-{index:04d}",
                profile=first.profile,
                manifest=manifest,
                phase=phases[index % len(phases)],
                desired_replicas=1,
                deployed_at=now - timedelta(minutes=index),
            )
        )
    Application.objects.bulk_create(rows, batch_size=500)
    client = Client()
    client.force_login(user)
    return client


def measure(client: Client, path: str, n: int) -> dict:
    return timed_gets(client, path, n, warm_up=5)  # templates and connections warmed up


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    call_command("migrate", verbosity=0)
    with FakeHub().serve() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        # syncType Manual: saved and checked, but no model server is started
        clients = {count: organisation_with(count) for count in SIZES}
    cases = [
        ("GET / (first page of 50)", "/", SIZES),
        ("GET /?sort=-deployed_at", "/?sort=-deployed_at", SIZES),
        ("GET /?page=20", "/?page=20", (1000,)),
    ]
    print(f"Models dashboard: {n} requests each through django.test.Client, SQLite file")
    print(
        f"Load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs before the run. "
        "cpu ms: this process's CPU time per request, less disturbed by other processes."
    )
    print(f"{'request':26}" + "".join(f" | {f'{c} applications':^38}" for c in SIZES))
    print(
        f"{'':26}" + f" | {'median ms':>9} {'p95 ms':>9} {'cpu ms':>8} {'queries':>8}" * len(SIZES)
    )
    at_most = []
    for label, path, sizes in cases:
        line = f"{label:26}"
        for count in SIZES:
            if count not in sizes:
                line += f" | {'-':>9} {'-':>9} {'-':>8} {'-':>8}"
                continue
            result = measure(clients[count], path, n)
            if count == max(SIZES):
                at_most.append(result)
            line += (
                f" | {result['median']:9.1f} {result['p95']:9.1f} {result['cpu']:8.1f}"
                f" {result['queries']:8d}"
            )
        print(line)
    wall = max(r["median"] for r in at_most)
    cpu = max(r["cpu"] for r in at_most)
    verdict = "met" if wall < TARGET_MS else "NOT met"
    print(
        f"Target, median under {TARGET_MS:.0f} ms with {max(SIZES)} applications: {verdict} "
        f"(slowest median {wall:.1f} ms wall, {cpu:.1f} ms CPU)"
    )


if __name__ == "__main__":
    main()
