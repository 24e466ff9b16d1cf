"""What the model overview shows beside its status: the serving facts (from the manifest with
every default filled and the backend's record) and the cost (replica time priced from the
profile's machine catalog, per day, per 1,000 tokens and per API key)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.backends.local import runtimes as rt
from jobs.backends.local.backend import local_runner
from jobs.backends.local.command import DEFAULT_TEMPLATE, configured_template
from jobs.manifest.view import FilledManifest
from jobs.models import Application, UsageMinute
from jobs.usage import cost
from jobs.usage.charts import WINDOWS, cache_key, usage_per_key
from jobs.usage.replica_time import replica_seconds_per_day

COST_DAYS = 7  # the span cost per 1,000 tokens and per key are over: the 7-day chart's


@dataclass(frozen=True)
class Fact:
    label: str
    value: str


def _engine_words(filled: FilledManifest, application: Application) -> str:
    engine = filled.engine or "vllm"
    if engine == "vllm":
        return f"vLLM {application.profile.vllm_version}"
    return engine


def local_runtime_words(recorded: str) -> str:
    """The server the local backend started, as it recorded it (Application.runtime), with
    its package's version for a CPU runtime."""
    where = "as a process on this machine (each replica's log starts with the command it runs)"
    spec = rt.CPU_RUNTIMES.get(recorded)
    if spec is not None:
        version = rt.installed_version(spec.name, rt.configured_runtimes_dir())
        if version is None:
            named = spec.label
        elif spec.package == spec.label:
            named = f"{spec.label} {version}"
        else:
            named = f"{spec.label} ({spec.package} {version})"
        return f"{named}, a CPU runtime, {where}"
    if recorded == rt.VLLM:
        return f"vLLM (vllm serve), {where}"
    if recorded:
        return f"{recorded}, {where}"
    if configured_template() != DEFAULT_TEMPLATE:
        return f"the server SERVEDECK_LOCAL_COMMAND names, {where}"
    return (
        "not started yet: the local backend chooses vLLM for a replica on GPUs, else the CPU "
        "runtime of the model's task"
    )


def _chosen_because(application: Application) -> str:
    """Why the local backend runs it on that server, as recorded when it was applied."""
    return local_runner(application.organization.slug).chosen_because(application.name)


def serving_facts(application: Application, revision_number: int | None) -> list[Fact]:
    filled = FilledManifest(application.manifest)
    profile = application.profile
    cluster = profile.cluster
    if filled.on_gpu:
        count = (filled.gpu_count or 1) * (filled.nodes or 1)
        compute = f"{count} × {filled.gpu_kind or 'GPU'} per replica"
    else:
        cpu = filled.model_get("resources", "cpu")
        memory = filled.model_get("resources", "memory")
        compute = f"CPU only ({cpu or '?'} cores, {memory or '?'} memory per replica)"
    scaling = filled.max_replicas
    wanted = f"{filled.min_replicas}" + (
        f" to {scaling}" if scaling and scaling != filled.min_replicas else ""
    )
    context = filled.context_tokens
    image = filled.model_get("runtime", "image")
    runtime = _engine_words(filled, application)
    if isinstance(image, str) and image:
        runtime += f", image {image}"
    elif cluster.backend == cluster.Backend.KUBERNETES:
        runtime += " (the cluster's serving runtime image; each pod's is under Logs)"
    else:
        runtime = local_runtime_words(application.runtime)
        why = _chosen_because(application)
        if why:
            runtime += f". {why}"
    return [
        Fact("Model", application.model_uri),
        Fact("Revision", str(revision_number) if revision_number else "none yet"),
        Fact("Runtime", runtime),
        Fact("GPU", compute),
        Fact("Context window", f"{context:,} tokens" if context else "the model's own"),
        Fact(
            "Replicas",
            f"{application.ready_replicas} ready of {application.desired_replicas} "
            f"(asks for {wanted})",
        ),
        Fact("Profile", f"{profile.name} (namespace {filled.namespace or profile.namespace})"),
        Fact("Cluster", f"{cluster.name} ({cluster.get_backend_display()})"),
    ]


@dataclass(frozen=True)
class CostSummary:
    unit: cost.Unit
    days: list[cost.Day]
    total: float | None
    week_cost: float | None
    week_tokens: int
    per_thousand_tokens: float | None
    keys: list[dict[str, Any]]

    @property
    def priced(self) -> bool:
        return self.unit.hourly_price is not None


def cost_summary(application: Application, now: datetime | None = None) -> CostSummary:
    """Four queries however much replica time and traffic there is."""
    now = now or datetime.now(UTC)
    unit = cost.unit_of(application.manifest, application.profile.machine_catalog)
    days = cost.per_day(replica_seconds_per_day(application, now), unit)
    since = (now - timedelta(days=COST_DAYS - 1)).date()
    week = [d for d in days if d.day >= since]
    week_cost = cost.total_cost(week) if week else (0.0 if unit.hourly_price is not None else None)
    rows = UsageMinute.objects.filter(application=application)
    window = WINDOWS["7d"]
    keys = usage_per_key(rows, window, now, cache_key(application))
    tokens = sum(k["tokens"] for k in keys)
    for key, share in zip(keys, cost.share_per_key(week_cost, keys), strict=True):
        key["cost"] = share
    return CostSummary(
        unit=unit,
        days=days[:14],
        total=cost.total_cost(days),
        week_cost=week_cost,
        week_tokens=tokens,
        per_thousand_tokens=cost.per_thousand_tokens(week_cost, tokens),
        keys=keys,
    )
