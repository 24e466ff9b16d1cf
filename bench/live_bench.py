"""The live overview's figures, from one run (final figures are taken on a quiet machine):

1. From a message on the channel layer (Redis) to the browser's DOM updated: a status change
   is saved and announced from this process; Chromium, on the application's page served by a
   console process, notes when the badge was swapped (median and p95, target < 200 ms).
2. 200 WebSocket clients on one application under a steady 100 metered requests per second
   through the console's gateway: messages per second the console sends, the fewest any client
   got, and the console process's CPU, side by side with the same traffic and no clients
   (target: under half a core).

Needs Redis (REDIS_URL, default redis://127.0.0.1:6379/7) and Debian's Chromium. Everything
else is made here: a scratch database, the stand-in model server through the local backend,
an API key, the console (`python -m console.serve`) on a free port.
Run: .venv/bin/python bench/live_bench.py [seconds of traffic per case, default 15]
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/7")
os.environ["REDIS_PREFIX"] = f"live-bench-{uuid.uuid4().hex[:8]}"
os.environ["SERVEDECK_RECONCILER_IN_PROCESS"] = "false"  # this process follows the model
# The 200 clients stand for 200 viewers but sign in as one user: lift the cap on one user's
# live pages in one console process (50 by default; past it a socket is closed with 4429).
os.environ["SERVEDECK_LIVE_SOCKETS_PER_USER"] = "250"

from gateway_bench import cpu_seconds  # noqa: E402
from scratch import ROOT, django_on_scratch  # noqa: E402

WORK = django_on_scratch("live")
os.environ["ALLOWED_HOSTS"] = "127.0.0.1,localhost"

import aiohttp  # noqa: E402
from asgiref.sync import async_to_sync  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client  # noqa: E402

from accesspolicies.models import Membership, Organization, Role  # noqa: E402
from jobs.backends.local.backend import forget_local_runner  # noqa: E402
from jobs.deploy import apply  # noqa: E402
from jobs.live.groups import application_group  # noqa: E402
from jobs.models import Application, Cluster, Profile  # noqa: E402
from jobs.reconciler import Reconciler  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402
from tests.helpers import SHORTEST  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CLIENTS = 200
RATE = 100  # metered requests per second
FLIPS = 30
DOM_TARGET_MS = 200.0
CPU_TARGET = 0.5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def set_up() -> tuple[str, str, str]:
    """An organisation, its admin, bge-embed Running on the stand-in, an API key; returns the
    admin's session cookie, the key, and the application's group."""
    org = Organization.objects.create(slug="acme", name="Acme")
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    user = get_user_model().objects.create_user(username="ada")
    membership = Membership.objects.create(organization=org, user=user, role=Role.ADMIN)
    application = apply(SHORTEST, membership).application
    reconciler = Reconciler()
    deadline = time.monotonic() + 30
    while application.phase != "Running":
        if time.monotonic() > deadline:
            raise SystemExit(f"bge-embed is {application.phase}: {application.reason}")
        reconciler.step_local()
        application.refresh_from_db()
        time.sleep(0.1)
    out = io.StringIO()
    call_command("apikey", "create", "bench", "--json", stdout=out)
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value, json.loads(out.getvalue())["key"], application


# The console's output, kept after the run (the scratch folder is not) for a socket it closed.
CONSOLE_LOG = Path(tempfile.gettempdir()) / "servedeck-live-bench-console.log"


def start_console(port: int) -> subprocess.Popen:
    with CONSOLE_LOG.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "console.serve", "-b", "127.0.0.1", "-p", str(port)]
            + ["console.asgi:application"],
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("the console did not start") from None
            time.sleep(0.2)


def in_a_thread(function, *args):
    """ORM and async_to_sync calls off Playwright's loop."""

    def call():
        try:
            return function(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=60)


def flip(application, phase: str) -> float:
    """Save a phase and announce it on the layer; return when it was sent (epoch ms)."""
    Application.objects.filter(pk=application.pk).update(phase=phase)
    layer = get_channel_layer()
    message = {"type": "application.status", "name": application.name, "phase": phase}
    sent = time.time() * 1000
    async_to_sync(layer.group_send)(application_group(application.pk), message)
    return sent


WATCH = """() => {
  window.__swapped = [];
  const head = document.querySelector('h1');
  new MutationObserver(() => {
    const badge = document.getElementById('live-phase');
    if (badge && badge.textContent !== window.__last) {
      window.__last = badge.textContent;
      window.__swapped.push(performance.timeOrigin + performance.now());
    }
  }).observe(head, {childList: true, subtree: true, characterData: true});
}"""


def dom_latency(base: str, cookie: str, application) -> list[float]:
    from playwright.sync_api import sync_playwright

    latencies = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        page = context.new_page()
        page.goto(f"{base}/models/bge-embed/")
        page.wait_for_function("() => document.getElementById('live-traffic')")
        page.wait_for_timeout(1000)  # the socket's catch-up is in
        page.evaluate(WATCH)
        for index in range(FLIPS):
            phase = "Loading" if index % 2 == 0 else "Running"
            sent = in_a_thread(flip, application, phase)
            page.wait_for_function(f"() => window.__swapped.length >= {index + 1}", timeout=5000)
            swapped = page.evaluate(f"() => window.__swapped[{index}]")
            latencies.append(swapped - sent)
            page.wait_for_timeout(400)  # past the page's coalescing interval
        browser.close()
    return latencies


async def traffic_with_clients(base: str, cookie: str, key: str, clients: int, seconds: float):
    """`clients` sockets on the overview while RATE requests a second go through the gateway."""
    ws_base = base.replace("http://", "ws://")
    headers = {"Cookie": f"sessionid={cookie}", "Origin": base}
    counts = [0] * clients
    closed: list = []  # (message type, close code) of every socket the console closed
    stop = asyncio.Event()
    answered = {"ok": 0, "failed": 0}
    connector = aiohttp.TCPConnector(limit=0)  # 200 sockets stay open beside the calls
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:

        async def listen(index: int, ready: asyncio.Event) -> None:
            async with session.ws_connect(f"{ws_base}/ws/applications/bge-embed/") as ws:
                await ws.receive()  # the catch-up
                ready.set()
                while not stop.is_set():
                    try:
                        message = await asyncio.wait_for(ws.receive(), 0.5)
                    except TimeoutError:
                        continue
                    if message.type != aiohttp.WSMsgType.TEXT:
                        closed.append((message.type.name, ws.close_code))
                        return
                    counts[index] += 1

        readies = [asyncio.Event() for _ in range(clients)]
        listeners = [asyncio.create_task(listen(i, readies[i])) for i in range(clients)]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)

        auth = {"Authorization": f"Bearer {key}"}
        body = {"model": "bge-embed", "messages": [{"role": "user", "content": "Say three words"}]}

        async def call() -> None:
            try:
                async with session.post(
                    f"{base}/v1/chat/completions", json=body, headers=auth
                ) as r:
                    await r.read()
                    answered["ok" if r.status == 200 else "failed"] += 1
            except aiohttp.ClientError:
                answered["failed"] += 1

        calls = set()
        started = time.monotonic()
        counts_before = list(counts)
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            while sent < elapsed * RATE:
                task = asyncio.create_task(call())
                calls.add(task)
                task.add_done_callback(calls.discard)
                sent += 1
            await asyncio.sleep(0.005)
        duration = time.monotonic() - started
        await asyncio.gather(*calls)
        stop.set()
        await asyncio.gather(*listeners, return_exceptions=True)
    got = [after - before for after, before in zip(counts, counts_before, strict=True)]
    return duration, answered, got, closed


def load_case(base, cookie, key, pid, clients, seconds):
    before = cpu_seconds(pid)
    started = time.monotonic()
    duration, answered, got, closed = asyncio.run(
        traffic_with_clients(base, cookie, key, clients, seconds)
    )
    cores = (cpu_seconds(pid) - before) / (time.monotonic() - started)
    return duration, answered, got, closed, cores


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    call_command("migrate", verbosity=0)
    try:
        with FakeHub().serve() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            cookie, key, application = set_up()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        console = start_console(port)
        try:
            latencies = dom_latency(base, cookie, application)
            median = statistics.median(latencies)
            p95 = sorted(latencies)[int(len(latencies) * 0.95) - 1]
            print(f"message on the layer (Redis) -> DOM updated, {len(latencies)} changes:")
            print(
                f"  median {median:.1f} ms, p95 {p95:.1f} ms (target median < {DOM_TARGET_MS:.0f})"
            )
            print()
            print(f"{RATE} metered requests/s through the gateway for {seconds:.0f} s:")
            print(
                f"{'clients':>8} {'req/s ok':>9} {'failed':>7} {'msgs/s sent':>12} "
                f"{'fewest/client':>14} {'console CPU':>12}"
            )
            for clients in (0, CLIENTS):
                duration, answered, got, closed, cores = load_case(
                    base, cookie, key, console.pid, clients, seconds
                )
                total = sum(got)
                fewest = min(got) if got else 0
                print(
                    f"{clients:>8} {answered['ok'] / duration:>9.1f} {answered['failed']:>7} "
                    f"{total / duration:>12.1f} {fewest:>14} {cores:>9.2f} core"
                )
                if closed:
                    print(f"         {len(closed)} sockets closed by the console: {closed[:5]}")
                    print(f"         (the console's output: {CONSOLE_LOG})")
            print(f"(target: every client keeps updating; the console under {CPU_TARGET} core)")
        finally:
            console.terminate()
            console.wait(15)
    finally:
        forget_local_runner()


if __name__ == "__main__":
    main()
