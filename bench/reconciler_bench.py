"""Time the reconciler against the Kubernetes API emulator on 127.0.0.1, in one run:

1. status change latency: a ClusterFollower runs its threads; the InferenceService and pod of
   one application go not-ready -> ready and back, and each change is timed until the
   Application row shows the new phase AND the message reached its channel-layer group;
2. render() of a full manifest (bench/render_bench.py's manifest);
3. following 1,000 applications: the first full pass after start, then a burst of 1,000 pod
   updates (watch events per second, time until every phase matches), then where a drain's
   time goes, step by step (database read, observe's API calls, derive_status, record_status).

Uses a throwaway SQLite file (DATABASE_URL), var folder and the fake Hub; the channel layer is
the in-memory one unless REDIS_URL is set. The emulator runs in a child process, so its own
Python (a real API server is elsewhere) does not share the GIL with the follower's threads.
Run: .venv/bin/python bench/reconciler_bench.py [--changes 30] [--apps 1000] [--sample 300]
(about two minutes on two CPUs; other processes on the machine move the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from scratch import django_on_scratch  # noqa: E402

WORK = django_on_scratch("reconciler")

from asgiref.sync import async_to_sync  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from accesspolicies.models import Membership, Organization, Role  # noqa: E402
from jobs.backends.base import Observed  # noqa: E402
from jobs.backends.kubernetes.backend import ClusterBackend, forget_clients, status_of  # noqa: E402
from jobs.deploy import apply, dry_run  # noqa: E402
from jobs.lifecycle import group_name, record_status  # noqa: E402
from jobs.models import Application, Phase, Profile  # noqa: E402
from jobs.reconciler.watching import ClusterFollower  # noqa: E402
from jobs.render import render, render_for_profile  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402
from tests.fakes.kube_objects import emulator_profile, predictor_pod, with_status  # noqa: E402
from tests.helpers import SHORTEST  # noqa: E402

TARGET_LATENCY_MS = 1000.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


# --- the emulator, in a child process ------------------------------------------------------


def _resource_of(path: str) -> str:
    """'get inferenceservices', 'list pods', … from an API path (names left out)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    if not rest:
        return "discovery"
    return f"{'get' if len(rest) > 1 else 'list'} {rest[0]}"


def _emulator_process(conn, directory: str) -> None:
    """Serve a KubeEmulator and answer the parent's commands over `conn` until "stop"."""
    from tests.fakes.kube import KubeEmulator

    class ServiceTimed(KubeEmulator):
        """Adds up the emulator's own time per request kind (watch streams excluded)."""

        def __init__(self, *args, **kwargs):
            self.service: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
            self.service_lock = threading.Lock()
            super().__init__(*args, **kwargs)

        def handle(self, method, path, query, headers, body):
            start = time.perf_counter()
            reply = super().handle(method, path, query, headers, body)
            if isinstance(reply, tuple):
                label = f"{method} {_resource_of(path)}"
                with self.service_lock:
                    entry = self.service[label]
                    entry[0] += 1
                    entry[1] += time.perf_counter() - start
            return reply

    emulator = ServiceTimed(Path(directory)).start()
    conn.send(emulator.url)
    try:
        while True:
            command, *args = conn.recv()
            if command == "put":
                conn.send(len([emulator.put(obj) for obj in args[0]]))
            elif command == "put_at_once":
                # Under the emulator's lock: the watches see the whole burst at once, as when
                # a node with many pods fails, rather than as fast as this loop writes.
                with emulator._cond:
                    conn.send(len([emulator.put(obj) for obj in args[0]]))
            elif command == "get":
                conn.send(emulator.get(*args))
            elif command == "compact":
                emulator.compact(close_watches=True)
                conn.send(None)
            elif command == "service":
                with emulator.service_lock:
                    conn.send({k: tuple(v) for k, v in emulator.service.items()})
                    emulator.service.clear()
            elif command == "cpu":
                conn.send(time.process_time())
            elif command == "stop":
                break
    finally:
        emulator.stop()
        conn.send("stopped")


class RemoteKube:
    """The parent's handle on the emulator process: put, get, compact, stop."""

    def __init__(self) -> None:
        directory = WORK / "kube"
        context = multiprocessing.get_context("fork")  # before any thread of ours exists
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_emulator_process, args=(child, str(directory)), daemon=True
        )
        self.process.start()
        self.url = self.conn.recv()
        self.kubeconfig_path = directory / "kubeconfig"
        self.lock = threading.Lock()

    def _call(self, *command):
        with self.lock:
            self.conn.send(command)
            return self.conn.recv()

    def put(self, *objects: dict) -> int:
        return self._call("put", list(objects))

    def put_at_once(self, *objects: dict) -> int:
        return self._call("put_at_once", list(objects))

    def get(self, kind: str, name: str, namespace: str) -> dict | None:
        return self._call("get", kind, name, namespace)

    def compact(self) -> None:
        self._call("compact")

    def service_times(self) -> dict[str, tuple[int, float]]:
        """{"GET list pods": (calls, seconds)} since the last call."""
        return self._call("service")

    def cpu(self) -> float:
        """The emulator process's CPU seconds so far."""
        return self._call("cpu")

    def stop(self) -> None:
        if self.process.is_alive():
            self._call("stop")
        self.process.join(10)


# --- the console's side ---------------------------------------------------------------------


class TimedFollower(ClusterFollower):
    """The product's follower; each drain's start, end and size are kept for the report."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes: list[tuple[float, float, int, int]] = []  # start, end, keys, changed
        self.draining = False
        self.most_dirty = 0
        self.marked = 0  # watch events about an application, and when the last one came
        self.last_mark = 0.0

    def mark(self, key):
        super().mark(key)
        self.marked += 1
        self.last_mark = time.perf_counter()
        self.most_dirty = max(self.most_dirty, len(self.dirty))

    def drain(self) -> int:
        self.draining = True
        before, start = self.counts["drained"], time.perf_counter()
        try:
            changed = super().drain()
        finally:
            self.draining = False
        keys = self.counts["drained"] - before
        if keys:
            self.passes.append((start, time.perf_counter(), keys, changed))
        return changed

    def idle_since(self, seconds: float) -> bool:
        with self.lock:
            dirty = bool(self.dirty)
        last = self.passes[-1][1] if self.passes else 0.0
        return not dirty and not self.draining and time.perf_counter() - last >= seconds

    def join(self, threads: list[threading.Thread], timeout: float = 10.0) -> None:
        self.stop()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class GroupListener:
    """A channel subscribed to one application's group, in its own thread and event loop;
    every message is kept with the time it arrived."""

    STOP = "bench.stop"

    def __init__(self, group: str) -> None:
        self.group = group
        self.channel = ""
        self.received: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._listen(),), daemon=True)
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the channel layer did not let the listener subscribe")

    async def _listen(self) -> None:
        layer = get_channel_layer()
        self.channel = await layer.new_channel()
        await layer.group_add(self.group, self.channel)
        # The in-memory layer wakes a waiting receive from the sender's thread without waking
        # this loop's selector: a 5 ms tick bounds how late an arrival is noticed.
        tick = asyncio.create_task(self._tick())
        self.ready.set()
        try:
            while (message := await layer.receive(self.channel)).get("type") != self.STOP:
                with self.lock:
                    self.received.append((time.perf_counter(), message))
        finally:
            tick.cancel()
            await layer.group_discard(self.group, self.channel)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.005)

    def first(self, since: int, phase: str) -> float | None:
        with self.lock:
            for at, message in self.received[since:]:
                if message.get("phase") == phase:
                    return at
        return None

    def count(self) -> int:
        with self.lock:
            return len(self.received)

    def close(self) -> None:
        """A message that ends the loop: cancelling a Redis receive midway is not clean."""
        async_to_sync(get_channel_layer().send)(self.channel, {"type": self.STOP})
        self.thread.join(5)


def manifest_named(name: str, profile: str) -> str:
    return SHORTEST.replace("name: bge-embed", f"name: {name}").replace(
        "profileName: local", f"profileName: {profile}"
    )


class CpuShare:
    """CPU seconds of this process and of the emulator's over a stretch of wall time: shows
    whether the console waits on the API, on the disk, or on the other processes here."""

    def __init__(self, kube: RemoteKube) -> None:
        self.kube = kube
        self.start = (time.perf_counter(), time.process_time(), kube.cpu())

    def __str__(self) -> str:
        wall, ours, theirs = (
            end - begin
            for end, begin in zip(
                (time.perf_counter(), time.process_time(), self.kube.cpu()), self.start, strict=True
            )
        )
        return (
            f"CPU in {wall:.1f} s: console process {ours:.1f} s ({ours / wall * 100:.0f} %), "
            f"emulator {theirs:.1f} s ({theirs / wall * 100:.0f} %)"
        )


def wait_until(condition, timeout: float, every: float = 0.05) -> float | None:
    """Seconds until condition() held, or None after timeout."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if condition():
            return time.perf_counter() - start
        time.sleep(every)
    return None


# --- 1. status change latency ---------------------------------------------------------------


def status_latency(membership, kube: RemoteKube, changes: int, started: list) -> None:
    namespace = "models"
    emulator_profile(membership.organization, kube, "prod", namespace)
    app = apply(manifest_named("bge-embed", "prod"), membership).application
    isvc = kube.get("InferenceService", "bge-embed", namespace)
    follower = TimedFollower(app.profile.cluster)
    started.append((follower, follower.start()))
    listener = GroupListener(group_name(app))
    shapes = {
        ready: (
            with_status(isvc, ready),
            predictor_pod("bge-embed", namespace, ready=ready, organization="bench"),
        )
        for ready in (True, False)
    }
    phases = {
        ready: str(status_of(app, obj, [pod], []).phase) for ready, (obj, pod) in shapes.items()
    }
    assert phases[True] != phases[False], phases

    def change(ready: bool, timeout: float = 10.0) -> tuple[float, float, float] | None:
        phase, since = phases[ready], listener.count()
        start = time.perf_counter()
        kube.put(*shapes[ready])
        saved_at = heard_at = None
        while time.perf_counter() - start < timeout:
            if saved_at is None and Application.objects.filter(pk=app.pk, phase=phase).exists():
                saved_at = time.perf_counter()
            if heard_at is None:
                heard_at = listener.first(since, phase)
            if saved_at is not None and heard_at is not None:
                return (max(saved_at, heard_at) - start, saved_at - start, heard_at - start)
            time.sleep(0.002)
        return None

    try:
        if change(True) is None:  # Pending -> Running once, untimed: connections warm up
            raise RuntimeError("the application never reached Running")
        results, missed = [], 0
        for index in range(changes):
            time.sleep(0.1)  # let the other watch's event of the last change drain
            timed = change(index % 2 == 1)
            if timed is None:
                missed += 1
            else:
                results.append(timed)
    finally:
        listener.close()
        follower.stop()
    both = [r[0] * 1000 for r in results]
    saved = [r[1] * 1000 for r in results]
    heard = [r[2] * 1000 for r in results]
    print(
        f"\n1. Status change latency, {phases[True]} <-> {phases[False]} "
        f"({len(results)} changes, {missed} not seen within 10 s; InferenceService + pod "
        "put, then row saved and group message heard)"
    )
    print(f"   {'':30} {'median ms':>10} {'p95 ms':>10} {'max ms':>10}")
    for label, values in (
        ("row saved and message heard", both),
        ("  row shows the phase", saved),
        ("  message on the group", heard),
    ):
        if values:
            print(
                f"   {label:30} {statistics.median(values):10.1f} "
                f"{percentile(values, 0.95):10.1f} {max(values):10.1f}"
            )
    if both:
        verdict = "met" if statistics.median(both) < TARGET_LATENCY_MS else "NOT met"
        print(f"   Target, median under {TARGET_LATENCY_MS:.0f} ms: {verdict}")


# --- 2. render ------------------------------------------------------------------------------


def render_time(n: int = 500) -> None:
    from bench.render_bench import CTX, FULL, TARGET  # the same full manifest
    from jobs.manifest import parse

    manifest = parse(FULL, CTX).manifest
    objects = render(manifest, TARGET, revision=3)
    for _ in range(50):
        render(manifest, TARGET, revision=3)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        render(manifest, TARGET, revision=3)
        times.append((time.perf_counter() - start) * 1000)
    print(
        f"\n2. render() of bench/render_bench.py's full manifest ({len(objects)} objects): median "
        f"{statistics.median(times):.2f} ms, p95 {percentile(times, 0.95):.2f} ms (n={n})"
    )


# --- 3. following many applications ---------------------------------------------------------


def fleet(membership, kube: RemoteKube, count: int) -> tuple[Profile, list[dict]]:
    """`count` applications app-0000…: rows bulk-created from one real dry run's filled-in
    manifest; each one's rendered InferenceService (Ready) and one ready pod put directly."""
    org, namespace = membership.organization, "fleet"
    profile = emulator_profile(org, kube, "fleet", namespace)
    run = dry_run(manifest_named("app-0000", "fleet"), org)
    assert run.ok, [str(p) for p in run.refusals]
    start = time.perf_counter()
    rows, objects, stamp = [], [], timezone.now()
    for index in range(count):
        name = f"app-{index:04d}"
        manifest = copy.deepcopy(run.manifest)
        manifest["spec"]["name"] = name
        rows.append(
            Application(
                organization=org,
                name=name,
                profile=profile,
                manifest=manifest,
                desired_replicas=1,
                deployed_at=stamp,
            )
        )
        (isvc,) = [
            o for o in render_for_profile(manifest, profile) if o["kind"] == "InferenceService"
        ]
        objects += [
            with_status(isvc, ready=True),
            predictor_pod(name, namespace, organization="bench"),
        ]
    Application.objects.bulk_create(rows, batch_size=500)
    for first in range(0, len(objects), 500):
        kube.put(*objects[first : first + 500])
    kube.compact()  # the history so far is in the list the follower starts from
    print(
        f"\n3. Following {count} applications (namespace {namespace}, one follower): rows and "
        f"{len(objects)} objects made in {time.perf_counter() - start:.1f} s"
    )
    return profile, [o for o in objects if o["kind"] == "InferenceService"]


def phase_count(profile: Profile, phase: str) -> int:
    return Application.objects.filter(profile=profile, phase=phase).count()


def follow_fleet(profile: Profile, kube: RemoteKube, count: int, started: list) -> TimedFollower:
    """Start a follower on the fleet's cluster; time its first pass and its start-up."""
    follower = TimedFollower(profile.cluster)
    cpu = CpuShare(kube)
    start = time.perf_counter()
    started.append((follower, follower.start()))
    first = wait_until(lambda: phase_count(profile, Phase.RUNNING) == count, 120)
    settled = wait_until(lambda: follower.idle_since(0.5), 120)
    idle = time.perf_counter() - start - 0.5
    if first is None:
        print(f"   first pass: NOT every application Running within 120 s "
              f"({phase_count(profile, Phase.RUNNING)} of {count})")  # fmt: skip
    else:
        print(
            f"   first pass (start -> every row Running): {first:.1f} s, "
            f"{count / first:.0f} applications/s"
        )
    passes = ", ".join(f"{keys} in {end - begin:.1f} s" for begin, end, keys, _ in follower.passes)
    print(
        f"   start-up: 3 relists each mark every application: {follower.counts['drained']} "
        f"observations in {len(follower.passes)} drains ({passes}); idle after "
        f"{idle:.1f} s" + ("" if settled is not None else " (NOT idle within 120 s)")
    )
    print(f"     {cpu}")
    return follower


def burst(follower: TimedFollower, profile: Profile, kube: RemoteKube, count: int) -> None:
    """Every application's pod starts crash-looping (OOMKilled): `count` pod updates at once."""
    namespace = profile.namespace
    pods = [
        predictor_pod(f"app-{i:04d}", namespace, ready=False, oom=True, organization="bench")
        for i in range(count)
    ]
    marked, drains = follower.marked, len(follower.passes)
    follower.most_dirty = 0
    cpu = CpuShare(kube)
    start = time.perf_counter()
    kube.put_at_once(*pods)
    released = time.perf_counter()
    watched = wait_until(lambda: follower.marked - marked >= count, 60, every=0.005)
    consistent = wait_until(lambda: phase_count(profile, Phase.FAILED) == count, 150)
    total = time.perf_counter() - start
    passes = follower.passes[drains:]
    print(
        f"   burst: {count} pod updates (ready -> OOMKilled: every phase becomes Failed), "
        f"written at once by the emulator in {released - start:.2f} s"
    )
    if watched is None:
        print(f"   watch events handled: only {follower.marked - marked} of {count} in 60 s")
    else:
        took = follower.last_mark - released
        print(
            f"   watch events handled: {count} in {took:.2f} s after the emulator let them "
            f"go, {count / took:.0f} events/s (the pods watch thread, which only marks)"
        )
    drained = sum(keys for _, _, keys, _ in passes)
    sizes = " + ".join(str(keys) for _, _, keys, _ in passes)
    if consistent is None:
        print(
            f"   every phase Failed: NOT within 150 s ({phase_count(profile, Phase.FAILED)} "
            f"of {count})"
        )
        return
    print(
        f"   every phase Failed {total:.1f} s after the burst: drains of {sizes} applications "
        f"({drained / total:.0f} applications/s); largest dirty set {follower.most_dirty}"
    )
    print(
        "   falls behind? Events never pile up (the dirty set holds each application once), "
        f"but the drain does {drained / total:.0f} applications/s: a change that arrives "
        f"behind a full dirty set waits up to {total:.0f} s, not the tens of ms of part 1"
    )
    print(f"     {cpu}")


def where_the_time_goes(profile: Profile, kube: RemoteKube, count: int, sample: int) -> None:
    """What drain() does for one application, step by step, in this thread (the follower is
    stopped), for `sample` of the `count` applications: every pod is ready again, so each
    status changes and record_status writes."""
    namespace = profile.namespace
    kube.put(
        *[predictor_pod(f"app-{i:04d}", namespace, organization="bench") for i in range(count)]
    )
    follower = ClusterFollower(profile.cluster)  # for its query; never started
    client = ClusterBackend(profile).client
    kube.service_times()  # count the emulator's time from here
    steps: Counter = Counter()
    cpu = CpuShare(kube)
    wall = time.perf_counter()
    for index in range(0, count, max(1, count // sample))[:sample]:
        name = f"app-{index:04d}"
        t0 = time.perf_counter()
        (application,) = follower._applications().filter(name=name)
        t1 = time.perf_counter()
        seen = client.observe(name, namespace, organization="bench")
        t2 = time.perf_counter()
        observed = Observed.of(status_of(application, seen.isvc, seen.pods, seen.events))
        t3 = time.perf_counter()
        record_status(application, observed)
        t4 = time.perf_counter()
        steps["database read (a query per application)"] += t1 - t0
        steps["observe: 3 API calls"] += t2 - t1
        steps["derive_status"] += t3 - t2
        steps["record_status: save, Event, group_send"] += t4 - t3
    wall = time.perf_counter() - wall
    cpu = str(cpu)
    service = kube.service_times()
    layer = get_channel_layer()
    message = {"type": "application.status", "name": "none", "phase": "Running"}
    announce = time.perf_counter()
    for _ in range(200):
        async_to_sync(layer.group_send)("application.0", message)
    announce = (time.perf_counter() - announce) / 200
    print(
        f"   where a drain's time goes, drain's steps one by one for {sample} of the {count} "
        f"applications: {wall / sample * 1000:.1f} ms each ({sample / wall:.0f}/s)"
    )
    for label, seconds in steps.most_common():
        share = f"{seconds / wall * 100:3.0f} %"
        print(f"     {label:46} {seconds / sample * 1000:6.2f} ms  {share}")
        if label.startswith("observe"):
            own = 0.0
            for what in ("get inferenceservices", "list pods", "list events"):
                calls, spent = service.get(f"GET {what}", (0, 0.0))
                own += spent / sample
                said = f"the emulator's own time, {what}"
                print(f"       {said:44} {spent / max(calls, 1) * 1000:6.2f} ms a call")
            rest = (seconds / sample - own) * 1000
            print(f"       {'the rest: HTTP and the kubernetes client':44} {rest:6.2f} ms")
        if label.startswith("record_status"):
            said = "of which group_send (async_to_sync)"
            print(f"       {said:44} {announce * 1000:6.2f} ms")
    print(f"     {cpu}")


def what_would_help(profile: Profile, isvcs: list[dict], count: int) -> None:
    """A drain as it could be, from the product's own functions: one query for every dirty
    application, derive_status from objects the watches already delivered (no API call), and
    the writes in one transaction. Every status changes (to Loading), so each one writes."""
    namespace = profile.namespace
    follower = ClusterFollower(profile.cluster)
    names = [f"app-{i:04d}" for i in range(count)]
    shapes = {
        o["metadata"]["name"]: (
            with_status(o, ready=False),
            [predictor_pod(o["metadata"]["name"], namespace, ready=False, organization="bench")],
        )
        for o in isvcs
    }
    start = time.perf_counter()
    applications = list(follower._applications().filter(name__in=names))
    read = time.perf_counter() - start
    start = time.perf_counter()
    statuses = [
        Observed.of(status_of(a, shapes[a.name][0], shapes[a.name][1], [])) for a in applications
    ]
    derive = time.perf_counter() - start
    start = time.perf_counter()
    with transaction.atomic():
        changed = sum(record_status(a, o) for a, o in zip(applications, statuses, strict=True))
    write = time.perf_counter() - start
    total = read + derive + write
    print(
        f"   what-if, same product functions: one query for all {count} ({read * 1000:.0f} ms), "
        f"derive_status from objects in memory ({derive / count * 1000:.2f} ms each), "
        f"{changed} record_status in one transaction ({write / count * 1000:.2f} ms each): "
        f"{count / total:.0f} applications/s, {total:.1f} s for all"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=30, help="status changes to time")
    parser.add_argument("--apps", type=int, default=1000, help="applications to follow")
    parser.add_argument("--sample", type=int, default=300, help="applications timed step by step")
    args = parser.parse_args()
    kube = RemoteKube()  # forks first: no thread of this process exists yet
    started: list[tuple[ClusterFollower, list[threading.Thread]]] = []
    try:
        call_command("migrate", verbosity=0)
        layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
        print(
            f"Reconciler bench: emulator {kube.url} (child process), SQLite file, {layer}; "
            f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f} before the run"
        )
        with FakeHub().serve() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            org = Organization.objects.create(slug="bench", name="Bench")
            user = get_user_model().objects.create_user(username="deployer")
            membership = Membership.objects.create(organization=org, user=user, role=Role.DEPLOYER)
            status_latency(membership, kube, args.changes, started)
            render_time()
            profile, isvcs = fleet(membership, kube, args.apps)
        follower = follow_fleet(profile, kube, args.apps, started)
        burst(follower, profile, kube, args.apps)
        follower.stop()
        wait_until(lambda: not follower.draining, 60)
        where_the_time_goes(profile, kube, args.apps, min(args.sample, args.apps))
        what_would_help(profile, isvcs, args.apps)
    finally:
        # The watches end when the emulator goes; saying so as a warning would be noise here.
        logging.getLogger("jobs.reconciler.watching").setLevel(logging.ERROR)
        for follower, _ in started:
            follower.stop()
        kube.stop()
        for _, threads in started:
            for thread in threads:
                thread.join(10)
        forget_clients()
        connection.close()
    print(f"Load average {os.getloadavg()[0]:.2f} after the run.")


if __name__ == "__main__":
    main()
