"""What the surfaces show of benchmarks: one run as the REST API and the command line give it,
and the model page's part (the latest run, the chart's figures, the last run per revision).

    body(run)             # {"id", "revision", "state", "levels": [...], ...}
    page_context(app)     # {"benchmarks": ..., "benchmark_chart": ..., "benchmark_by_revision"}
"""

from __future__ import annotations

from jobs.models import Application, Benchmark, Rollout
from jobs.status.phases import Phase

from .plan import PLANS
from .runs import FIGURES, end_overdue

# Revisions compared on the page, newest first.
COMPARED_REVISIONS = 10
PROMPT_SOURCES = {
    "tokenizer": "sized with the model's own tokenizer",
    "estimate": "plain synthetic text, estimated at 4 bytes a token (no tokenizer reachable)",
    "audio": "a generated 3-second tone",
}


def level_body(level) -> dict:
    return {name: getattr(level, name) for name in FIGURES}


def body(run: Benchmark) -> dict:
    plan = PLANS.get(run.task)
    return {
        "id": run.pk,
        "application": run.application.name,
        "revision": run.revision.number,
        "task": run.task,
        "route": run.route,
        "state": run.state,
        "message": run.message,
        "promptSource": run.prompt_source,
        "promptTokens": run.prompt_tokens,
        "maxOutputTokens": plan.max_output_tokens if plan else 0,
        "startedBy": run.started_by.get_username() if run.started_by else None,
        "createdAt": run.created_at,
        "finishedAt": run.finished_at,
        "deadline": run.deadline,
        "levels": [level_body(level) for level in run.levels.all()],
    }


def runs_of(application: Application, limit: int = 20) -> list[Benchmark]:
    """The application's latest runs, newest first, with their levels and revisions."""
    end_overdue(application)
    found = application.benchmarks.select_related("revision", "started_by", "application")
    return list(found.prefetch_related("levels")[:limit])


def last_per_revision(runs: list[Benchmark]) -> list[Benchmark]:
    """The newest finished run of each revision among `runs` (newest first), newest revision
    first: what the page compares."""
    seen: dict[int, Benchmark] = {}
    for run in runs:
        if run.state == Benchmark.State.SUCCEEDED and run.revision.number not in seen:
            seen[run.revision.number] = run
    ordered = sorted(seen.values(), key=lambda r: -r.revision.number)
    return ordered[:COMPARED_REVISIONS]


def chart(compared: list[Benchmark]) -> list[dict]:
    """One series per compared revision, oldest first: figures by concurrency level."""
    series = []
    for run in reversed(compared):
        levels = list(run.levels.all())
        series.append(
            {
                "revision": run.revision.number,
                "task": run.task,
                "concurrency": [level.concurrency for level in levels],
                "outputTokensPerSecond": [level.output_tokens_per_second for level in levels],
                "requestsPerSecond": [level.requests_per_second for level in levels],
                "ttftP50": [level.ttft_p50_ms for level in levels],
                "ttftP95": [level.ttft_p95_ms for level in levels],
                "latencyP95": [level.latency_p95_ms for level in levels],
            }
        )
    return series


def headline(run: Benchmark) -> str:
    """A run in a few words, for its revision's row in deploy history: the top level's
    throughput ("880 tokens/s at 16 concurrent")."""
    levels = list(run.levels.all())
    if not levels:
        return run.state
    top = levels[-1]
    if top.output_tokens_per_second is not None:
        figure = f"{top.output_tokens_per_second:.0f} tokens/s"
    else:
        figure = f"{top.requests_per_second:.1f} requests/s"
    return f"{figure} at {top.concurrency} concurrent"


def results_context(application: Application) -> dict:
    """What the results part shows (jobs/_benchmark_results.html, a live fragment too)."""
    return page_context(application)


def page_context(application: Application, revisions=(), rollout: Rollout | None = None) -> dict:
    """The Benchmarks section's context; each of `revisions` (deploy history's rows) gets
    `benchmark_headline`, its last result in a few words ("" when it has none). `rollout`: the
    Canary rollout under way (the page has read it), whose two revisions get a button each."""
    runs = runs_of(application)
    compared = last_per_revision(runs)
    headlines = {run.revision.number: headline(run) for run in compared}
    for revision in revisions:
        revision.benchmark_headline = headlines.get(revision.number, "")
    running = next((r for r in runs if r.state == Benchmark.State.RUNNING), None)
    return {
        # During a Canary rollout: a button per revision, the canary's once it serves.
        "benchmark_rollout": None
        if rollout is None
        else {
            "stable": rollout.stable_revision,
            "canary": rollout.canary_revision,
            "canary_serving": rollout.canary_phase == Phase.RUNNING
            and bool(rollout.canary_endpoints),
        },
        "benchmark_runs": runs[:5],
        "benchmark_running": running,
        "benchmark_compared": compared,
        "benchmark_chart": chart(compared),
        "benchmark_sources": PROMPT_SOURCES,
    }
