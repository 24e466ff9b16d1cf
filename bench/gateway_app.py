"""The gateway for bench/gateway_bench.py: the production build (jobs/gateway/asgi.py), with a
meter that also counts what it was given and writes the count when flushed at shutdown, so the
bench can check that every request was metered exactly once."""

import os
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

from jobs.gateway.metering import Meter, RequestRecord  # noqa: E402
from jobs.gateway.mount import make_gateway  # noqa: E402


class CountingMeter(Meter):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def record(self, rec: RequestRecord) -> None:
        self.count += 1
        super().record(rec)

    def flush(self) -> None:
        super().flush()
        Path(os.environ["BENCH_METER_COUNT"]).write_text(str(self.count))


application = make_gateway(meter=CountingMeter())
