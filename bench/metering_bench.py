"""Time the meter, in one run:

1. record() per call (ns): one thread, records spread over 1, 100 and 1,000 (application, key)
   pairs, as the gateway calls it per answered request; also with a second thread flushing;
2. flush of 1,000 distinct (organisation, application, key) entries into UsageMinute on a
   scratch SQLite file: the first flush (rows made) and a later one (rows added to), with and
   without the channel-layer messages (one per application); on PostgreSQL instead when
   BENCH_DATABASE_URL names a database of yours (e.g. postgres://postgres@127.0.0.1/servedeck_gmeter:
   it is migrated, and the bench's rows are deleted afterwards);
3. render_metrics() with 1,000 applications x 2 routes x 2 status classes (2,000 histograms).

Run: .venv/bin/python bench/metering_bench.py [--records 300000] [--repeat 5]
Figures move with the machine's other load; read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from scratch import ROOT, django_on_scratch

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL")
if DATABASE_URL:
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    os.environ["DATABASE_URL"] = DATABASE_URL
    os.environ["SERVEDECK_VAR_DIR"] = tempfile.mkdtemp(prefix="servedeck-metering-bench-")
    import django

    django.setup()
    WORK = Path(DATABASE_URL.rsplit("/", 1)[-1])
else:
    WORK = django_on_scratch("metering")

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402

from accesspolicies.models import APIKey, Organization  # noqa: E402
from jobs.gateway.metering import Meter, RequestRecord  # noqa: E402
from jobs.gateway.prom import render_metrics  # noqa: E402
from jobs.models import Application, Cluster, Profile, UsageMinute  # noqa: E402


def records(count: int, pairs: int) -> list[RequestRecord]:
    now = time.time()
    return [
        RequestRecord(
            at=now,
            status=200 if i % 20 else 502,
            latency_ms=float(i % 700),
            organization_id=1,
            application_id=i % pairs,
            api_key_id=(i // pairs) % 3,
            route="/v1/chat/completions",
            stream=bool(i % 2),
            ttft_ms=12.0 if i % 2 else None,
            prompt_tokens=50,
            completion_tokens=120,
        )
        for i in range(count)
    ]


def time_record(count: int, pairs: int, repeat: int, flushing: bool) -> float:
    """Best ns per record() call over `repeat` runs."""
    batch = records(count, pairs)
    best = float("inf")
    for _ in range(repeat):
        meter = Meter(write=lambda batch: None, announce=False)
        stop = threading.Event()
        flusher = None
        if flushing:

            def flush_loop(meter=meter, stop=stop):
                while not stop.is_set():
                    meter.flush()
                    time.sleep(0.001)

            flusher = threading.Thread(target=flush_loop)
            flusher.start()
        record = meter.record
        start = time.perf_counter_ns()
        for rec in batch:
            record(rec)
        elapsed = time.perf_counter_ns() - start
        stop.set()
        if flusher:
            flusher.join()
        best = min(best, elapsed / count)
    return best


def scratch_objects(applications: int) -> tuple[Organization, list[Application], list[APIKey]]:
    org = Organization.objects.create(slug="bench", name="Bench")
    cluster = Cluster.objects.create(organization=org, name="local")
    profile = Profile.objects.create(organization=org, name="local", cluster=cluster)
    Application.objects.bulk_create(
        Application(organization=org, name=f"app-{n}", profile=profile, manifest={})
        for n in range(applications)
    )
    keys = APIKey.objects.bulk_create(
        APIKey(organization=org, name=f"key-{n}", lookup=f"lk{n:010d}", secret_hash="0" * 64)
        for n in range(2)
    )
    return org, list(Application.objects.filter(organization=org)), keys


def remove_bench_objects() -> None:
    for org in Organization.objects.filter(slug="bench"):
        UsageMinute.objects.filter(organization=org).delete()
        Application.objects.filter(organization=org).delete()
        Profile.objects.filter(organization=org).delete()
        org.delete()


def filled_meter(org, apps, keys, announce: bool) -> Meter:
    meter = Meter(announce=announce)
    now = time.time()
    for index, app in enumerate(apps):
        key = keys[index % 2] if index % 3 else None  # 1,000 distinct entries in all
        for status in (200, 200, 429):
            meter.record(
                RequestRecord(
                    at=now,
                    status=status,
                    latency_ms=float(index % 300),
                    organization_id=org.pk,
                    application_id=app.pk,
                    api_key_id=key.pk if key else None,
                    prompt_tokens=10,
                    completion_tokens=20,
                )
            )
    return meter


def time_flush(org, apps, keys, repeat: int, announce: bool) -> tuple[float, float]:
    """ms of the first flush of 1,000 entries (rows made) and the median of later ones."""
    UsageMinute.objects.filter(organization=org).delete()
    meter = filled_meter(org, apps, keys, announce)
    assert meter.pending_entries() == 2 * len(apps)  # 2xx and 4xx of each
    start = time.perf_counter()
    assert meter.flush()
    first = (time.perf_counter() - start) * 1000
    later = []
    for _ in range(repeat):
        meter = filled_meter(org, apps, keys, announce)
        start = time.perf_counter()
        assert meter.flush()
        later.append((time.perf_counter() - start) * 1000)
    assert UsageMinute.objects.filter(organization=org).count() in (
        len(apps),
        2 * len(apps),
    )  # a minute may turn
    return first, statistics.median(later)


def time_render(repeat: int) -> tuple[float, int]:
    meter = Meter(write=lambda batch: None, announce=False)
    for app in range(1000):
        meter._names[app] = f"app-{app}"
        for route in ("/v1/chat/completions", "/v1/embeddings"):
            for status in (200, 503):
                meter.record(
                    RequestRecord(
                        at=0.0, status=status, latency_ms=5.0, application_id=app, route=route
                    )
                )
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        text = render_metrics(meter, in_flight=lambda: 0)
        best = min(best, (time.perf_counter() - start) * 1000)
    return best, len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print(f"record() per call, best of {args.repeat} runs of {args.records:,} records")
    print(f"{'(application, key) pairs':>26} {'alone':>10} {'while flushing':>16}")
    for pairs in (1, 100, 1000):
        alone = time_record(args.records, pairs, args.repeat, flushing=False)
        busy = time_record(args.records, pairs, args.repeat, flushing=True)
        print(f"{pairs:>26,} {alone:>8.0f}ns {busy:>14.0f}ns")

    call_command("migrate", verbosity=0)
    remove_bench_objects()  # of a run that was interrupted
    org, apps, keys = scratch_objects(1000)
    print(f"\nflush of 1,000 distinct entries ({connection.vendor}, {WORK.name})")
    for announce in (False, True):
        first, later = time_flush(org, apps, keys, args.repeat, announce)
        what = "upsert + one usage.update per application" if announce else "upsert only"
        print(f"  {what:<44} first {first:7.1f} ms   later (median) {later:7.1f} ms")
    if DATABASE_URL:
        remove_bench_objects()
    else:
        print("  (set BENCH_DATABASE_URL to time PostgreSQL instead)")

    render_ms, size = time_render(args.repeat)
    print(
        "\nrender_metrics(), 1,000 applications x 2 routes x 2 classes: "
        f"{render_ms:.1f} ms, {size / 1024:.0f} KiB"
    )
    connections.close_all()


if __name__ == "__main__":
    sys.exit(main())
