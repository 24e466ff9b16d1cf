"""A typed, read-only view of a filled-in manifest (pure), so consumers ask for what they mean
(`replicas`, `gpu_count`, `namespace`) instead of digging through nested dicts.

It reads a manifest `parse` filled in (every default present), and stays safe on one stored
by an older version or written by hand: a value missing or of the wrong kind reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checks import DEFAULT_SCALE_TO_ZERO_AFTER, duration_seconds

MODEL_PATH = "spec.source.model"


def dig(doc: Any, *keys: str) -> Any:
    """The value under `keys`, or None when any part of the way is missing or not a mapping.

    The one `dig`: manifests, the objects jobs.render makes, what the cluster answers
    (jobs.status) and the local backend's checks all read nested mappings through it."""
    for key in keys:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class FilledManifest:
    """Accessors over a filled-in manifest. The dict itself is `data` (not copied: treat it
    as read-only)."""

    data: Mapping[str, Any]

    def get(self, *keys: str) -> Any:
        return dig(self.data, *keys)

    def model_get(self, *keys: str) -> Any:
        return dig(self.data, "spec", "source", "model", *keys)

    # --- spec ---
    @property
    def name(self) -> str | None:
        return _text(self.get("spec", "name"))

    @property
    def profile_name(self) -> str | None:
        return _text(self.get("spec", "profileName"))

    @property
    def namespace(self) -> str | None:
        return _text(self.get("spec", "namespace"))

    @property
    def sync_type(self) -> str:
        return _text(self.get("spec", "syncType")) or "Auto"

    @property
    def source_type(self) -> str | None:
        return _text(self.get("spec", "source", "type"))

    # --- the model ---
    @property
    def model(self) -> Mapping[str, Any]:
        model = self.model_get()
        return model if isinstance(model, Mapping) else {}

    @property
    def uri(self) -> str | None:
        return _text(self.model_get("uri"))

    @property
    def format(self) -> str | None:
        return _text(self.model_get("format"))

    @property
    def engine(self) -> str | None:
        return _text(self.model_get("runtime", "engine"))

    @property
    def dtype(self) -> str | None:
        return _text(self.model_get("engine", "dtype"))

    @property
    def task(self) -> str | None:
        return _text(self.model_get("task"))

    @property
    def on_gpu(self) -> bool:
        return isinstance(self.model_get("resources", "accelerator", "gpu"), Mapping)

    @property
    def gpu_kind(self) -> str | None:
        return _text(self.model_get("resources", "accelerator", "gpu", "model"))

    @property
    def gpu_count(self) -> int | None:
        return _whole(self.model_get("resources", "accelerator", "gpu", "countPerReplica"))

    @property
    def nodes(self) -> int | None:
        return _whole(self.model_get("resources", "nodesPerReplica"))

    @property
    def min_replicas(self) -> int:
        found = _whole(self.model_get("scaling", "minReplicas"))
        return 1 if found is None else found

    @property
    def max_replicas(self) -> int | None:
        return _whole(self.model_get("scaling", "maxReplicas"))

    @property
    def replicas(self) -> int:
        """The replicas the application asks for when it starts: minReplicas, one when
        minReplicas is 0 (awake, a sleeping model runs one)."""
        return max(self.min_replicas, 1)

    @property
    def sleep_after_seconds(self) -> int | None:
        """With minReplicas 0, how long without a request before the model sleeps; else None."""
        if self.min_replicas != 0:
            return None
        after = self.model_get("scaling", "scaleToZeroAfter")
        seconds = duration_seconds(after) if isinstance(after, str) else None
        return duration_seconds(DEFAULT_SCALE_TO_ZERO_AFTER) if seconds is None else seconds

    @property
    def context_tokens(self) -> int | None:
        return _whole(self.model_get("serving", "maxContextTokens"))

    @property
    def concurrency(self) -> int | None:
        return _whole(self.model_get("serving", "maxConcurrentRequests"))

    @property
    def gpu_memory_utilization(self) -> float | None:
        value = self.model_get("engine", "gpuMemoryUtilization")
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
