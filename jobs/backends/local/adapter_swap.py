"""A revision that changes only a vLLM model's LoRA adapters, taken by its running replicas
without a restart: each replica is asked to unload the adapters that went and load the ones
that came (vLLM's /v1/unload_lora_adapter and /v1/load_lora_adapter, which
VLLM_ALLOW_RUNTIME_LORA_UPDATING enables; jobs.manifest.adapters.runtime_swap decides).

Any failure answers False, and the runner restarts the replicas with the new manifest instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from . import runtimes as rt
from .state import Replica

logger = logging.getLogger(__name__)
# vLLM reads the adapter's files when asked to load it: a 64-rank adapter of a large model is
# hundreds of megabytes read from disk.
SWAP_SECONDS = 120.0


def swap(
    replicas: Sequence[Replica], unload: Sequence[str], load: Sequence[tuple[str, str]]
) -> bool:
    """Whether every replica unloaded `unload` and loaded `load` ((name, folder) each)."""
    if not replicas or any(r.pid is None or r.exit_code is not None for r in replicas):
        return False
    timeout = httpx.Timeout(SWAP_SECONDS, connect=5.0)
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for replica in replicas:
            base = f"http://{rt.LOOPBACK}:{replica.port}/v1"
            calls = [("unload_lora_adapter", {"lora_name": name}) for name in unload]
            calls += [
                ("load_lora_adapter", {"lora_name": name, "lora_path": path}) for name, path in load
            ]
            for route, body in calls:
                try:
                    answer = client.post(f"{base}/{route}", json=body)
                except httpx.HTTPError as exc:
                    logger.info("adapter swap: replica %s %s failed: %s", replica.index, route, exc)
                    return False
                if answer.status_code != 200:
                    logger.info(
                        "adapter swap: replica %s %s answered %s",
                        replica.index,
                        route,
                        answer.status_code,
                    )
                    return False
    return True
