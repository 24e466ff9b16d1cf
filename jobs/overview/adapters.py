"""The model page's Adapters section: each LoRA adapter of the manifest
(spec.source.model.adapters) with its own requests, success rate and tokens beside the base
model's, over the cost section's 7 days, from one grouped query of the metering rows (none for
a model without adapters)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobs.live.fragments import shown
from jobs.models import Application, UsageMinute
from jobs.overview.facts import COST_DAYS
from jobs.usage.readers import rates, totals_per_adapter

DAYS = COST_DAYS


@dataclass(frozen=True)
class AdapterUsage:
    name: str  # the model id clients call it by
    uri: str  # "" for one no longer in the manifest
    requests: int
    success_rate: str  # as the cards write it ("—" where nothing was asked)
    tokens: int  # prompt and completion
    base: bool = False  # the application's own model


def _items(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    model = ((manifest.get("spec") or {}).get("source") or {}).get("model") or {}
    items = model.get("adapters") if isinstance(model, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        (str(item["name"]), str(item.get("uri") or ""))
        for item in items
        if isinstance(item, Mapping) and isinstance(item.get("name"), str)
    ]


def _row(name: str, uri: str, sums: Mapping[str, Any] | None, seconds: float, **more):
    figures = rates(dict(sums or {}), seconds)
    return AdapterUsage(
        name=name,
        uri=uri,
        requests=figures["requests"],
        success_rate=shown(figures)["success_rate"],
        tokens=figures["prompt_tokens"] + figures["completion_tokens"],
        **more,
    )


def adapter_usage(application: Application, now: datetime | None = None) -> list[AdapterUsage]:
    """The base model first, then each adapter of the manifest in its order, then any adapter
    called in the window that the manifest no longer lists (uri ""); [] without adapters."""
    items = _items(application.manifest)
    if not items:
        return []
    rows = UsageMinute.objects.filter(application=application)
    per_adapter, seconds = totals_per_adapter(rows, DAYS * 24 * 60, now)
    out = [_row(application.name, application.model_uri, per_adapter.get(""), seconds, base=True)]
    out += [_row(name, uri, per_adapter.get(name), seconds) for name, uri in items]
    listed = {name for name, _ in items}
    gone = sorted(name for name in per_adapter if name and name not in listed)
    out += [_row(name, "", per_adapter[name], seconds) for name in gone]
    return out
