"""A gateway process for tests that need several: its snapshot comes from a JSON argument
instead of a database (one key, one route), its limits from Redis.

    python tests/gateway/static_gateway.py PORT REDIS_URL '{"digest":..., "lookup":..., ...}'
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

import uvicorn  # noqa: E402

from jobs.gateway.app import Gateway  # noqa: E402
from jobs.gateway.snapshot import Key, Limits, Route, Secret, Snapshot, SnapshotKeeper  # noqa: E402


def snapshot(spec: dict) -> Snapshot:
    key = Key(1, 1, "shared", spec["digest"], None, True, frozenset(), Limits(spec["rpm"]))
    route = Route(1, 1, "alpha", "Running", "", spec["upstream"], "vllm", None, None, 0)
    return Snapshot(
        secrets={spec["lookup"]: Secret(key, spec["digest"], None)},
        routes={(1, "alpha"): route},
        version=0,
    )


def main() -> None:
    port, redis_url, spec = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    keeper = SnapshotKeeper(
        loader=lambda version: snapshot(spec), counter=lambda: 0, touch_writer=lambda ids: None
    )
    gateway = Gateway(keeper=keeper, redis_url=redis_url)
    uvicorn.run(
        gateway,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
