"""Fields that become fixed: once the application exists (namespace, profile, queue, source
type) and once its model has served (artifact, format, runtime, isolation).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .context import ManifestContext
from .defaults import MODEL_PATH as M
from .defaults import Facts
from .problems import Out, show
from .view import dig


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") + (f" {moment.tzname()}" if moment.tzinfo else "")


def check_fixed(manifest: dict[str, Any], facts: Facts, ctx: ManifestContext, out: Out) -> None:
    existing = ctx.existing
    assert existing is not None
    old, new = existing.manifest, manifest
    del new  # compared through facts, which hold only well-typed values
    created = f"the application was created on {_when(existing.created_at)}"
    checks: list[tuple[str, tuple[str, ...], Any, str]] = [
        ("spec.source.type", ("spec", "source", "type"), facts.source_type, created),
        ("spec.namespace", ("spec", "namespace"), facts.namespace, created),
        (
            "spec.profileName",
            ("spec", "profileName"),
            facts.profile and facts.profile.name,
            created,
        ),
    ]
    model = ("spec", "source", "model")
    if facts.source_type == "Model" and dig(old, "spec", "source", "type") == "Model":
        if facts.queue_known:
            before = dig(old, *model, "queue", "name")
            if facts.queue_name != before:
                _refuse_fixed(out, f"{M}.queue.name", before, facts.queue_name, created)
        if existing.served_at is not None:
            served = f"the model first served on {_when(existing.served_at)}"
            checks += [
                (f"{M}.uri", (*model, "uri"), facts.uri and facts.uri.text, served),
                (f"{M}.format", (*model, "format"), facts.format, served),
                (f"{M}.runtime.engine", (*model, "runtime", "engine"), facts.engine, served),
                (
                    f"{M}.runtime.isolation",
                    (*model, "runtime", "isolation"),
                    facts.isolation,
                    served,
                ),
            ]
    refused: set[str] = set()
    for path, keys, value, since in checks:
        before = dig(old, *keys)
        # A new format picks a new default engine: one refusal (format) says it all.
        if path.endswith("runtime.engine") and f"{M}.format" in refused:
            continue
        if value is not None and before is not None and value != before:
            _refuse_fixed(out, path, before, value, since)
            refused.add(path)


def _refuse_fixed(out: Out, path: str, before: Any, value: Any, since: str) -> None:
    recreate = "delete the application and create it again under a new name"
    lead = " To serve other bytes, " if path.endswith(".uri") else " Otherwise, "
    out.refuse(
        path,
        f"is fixed since {since}: it was {show(before)}, now {show(value)}; accepts "
        f"{show(before)}. Set it back to {show(before)}.{lead}{recreate}.",
    )
