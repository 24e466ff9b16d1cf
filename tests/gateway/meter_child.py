"""A gateway-like process for the shutdown tests: migrate a scratch SQLite database, start a
meter that would not flush on its own for an hour, record COUNT requests, say "ready", wait.

    python tests/gateway/meter_child.py MODE COUNT
MODE: "plain" (nothing handles SIGTERM), "own-handler" (the process exits on SIGTERM its own
way, so the meter keeps that handler), "loop" (the meter is started inside a running asyncio
loop, as the gateway does on its first request)."""

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from jobs.gateway.metering import Meter, RequestRecord  # noqa: E402

mode, count = sys.argv[1], int(sys.argv[2])
call_command("migrate", verbosity=0)
meter = Meter(interval=3600)


def record_all() -> None:
    for i in range(count):
        meter.record(
            RequestRecord(at=time.time(), status=200 if i % 4 else 502, latency_ms=float(i % 90))
        )
    print("ready", flush=True)


if mode == "own-handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))

if mode == "loop":

    async def serve() -> None:
        meter.start()
        record_all()
        await asyncio.sleep(120)

    asyncio.run(serve())
else:
    meter.start()
    record_all()
    time.sleep(120)
