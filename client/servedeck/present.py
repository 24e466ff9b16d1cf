"""How applications, dry runs, API keys and Check model's answers are printed on a terminal.

One presenter for two surfaces: the console's own commands (`manage.py app|apikey|checkmodel`)
and the `servedeck` client both print through these functions, from the shapes the REST API
answers (dicts of JSON values; datetimes may be objects or ISO strings). Pure: no Django, no
I/O, so the client installs without the console.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

# --- plain formatting ----------------------------------------------------------------------

# Control characters but newline and tab: in a log line or a message a console relays (a
# model server's log holds what its callers sent), an escape sequence would drive the
# terminal (retitle it, hide lines, rewrite what was printed before).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab shown as its escape (\\x1b)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def dump(data: Any, output: str) -> str:
    """`-o json` or `-o yaml` of an API answer."""
    if output == "json":
        return json.dumps(data, indent=2, default=str)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def table_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as aligned columns, the first row being the header."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def moment(value: Any) -> datetime | None:
    """A datetime from an object or the API's ISO text (None for none)."""
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def when(value: Any) -> str:
    """A moment as every table shows it, in UTC to the minute; "never" for none."""
    found = moment(value)
    if found is None:
        return "never"
    if found.tzinfo is not None:
        found = found.astimezone(UTC)
    return found.strftime("%Y-%m-%d %H:%M")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


# --- manifests and their problems ------------------------------------------------------------


def error_line(message: str) -> str:
    """A refusal or failure on stderr, in the same words from the client and from manage.py
    (which would otherwise say `CommandError: ...`)."""
    return f"error: {message}"


def warning_line(message: str) -> str:
    return f"warning: {message}"


def problem_line(problem: Mapping[str, Any]) -> str:
    """A problem (path, message, level) as the command line prints it."""
    path = problem.get("path")
    said = f"{path}: {problem['message']}" if path else str(problem["message"])
    return warning_line(said) if problem.get("level") == "warning" else error_line(said)


def split_problems(problems: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(refusals, warnings) of a dry run's or a refused manifest's problems."""
    refusals, warnings = [], []
    for problem in problems:
        (warnings if problem.get("level") == "warning" else refusals).append(dict(problem))
    return refusals, warnings


def refused_summary(refusals: int) -> str:
    """The last line of a refused manifest, after every problem."""
    return f"refused: {plural(refusals, 'problem')}"


def dry_run_lines(body: Mapping[str, Any]) -> list[str]:
    """`app apply --dry-run` of a dry run that passed (the API's `?dryRun=true` answer)."""
    name = body["manifest"]["spec"]["name"]
    lines = [
        f"dry run: application/{name} would be: {body['action']}; nothing saved.",
        f"  runtime: {body.get('runtime')}",
        f"  scaling: {body.get('scaling')}",
    ]
    if body.get("sleeping"):
        lines.append(f"  scale to zero: {body['sleeping']}")
    check = body.get("checkModel")
    if check is not None:
        lines.append(f"  check model: {check.get('verdict')}")
        suggestion = check.get("suggestion")
        if suggestion:
            lines.append(f"  suggested size: {suggestion.get('text')}")
    return lines


# The API's word for what an apply did, and the command line's (kubectl's words).
APPLIED = {"created": "created", "updated": "configured"}


def applied_line(name: str, action: str, revision: int | None) -> str:
    if revision is None or action == "unchanged":
        return f"application/{name} unchanged"
    return f"application/{name} {APPLIED.get(action, action)} (revision {revision})"


def application_rows(summaries: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """`app list`: the API's application summaries as a table with its header."""
    rows = [("NAME", "PHASE", "PROFILE", "MODEL", "REPLICAS", "LAST DEPLOYED")]
    for app in summaries:
        replicas = f"{app['readyReplicas']}/{app['desiredReplicas']}"
        rows.append(
            (
                app["name"],
                app["phase"],
                app["profile"],
                app["model"],
                replicas,
                when(app.get("deployedAt")),
            )
        )
    return rows


def history_rows(revisions: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """`app history`: the API's revisions as a table with its header."""
    rows = [("REVISION", "WHEN", "WHO", "OUTCOME", "NOTE")]
    for r in revisions:
        note = f"rollback to {r['rolledBackFrom']}" if r.get("rolledBackFrom") else ""
        if r.get("release"):  # a Canary rollout's mark: Canary, Promoted, Rolled back, Aborted
            note = f"{note}; {r['release']}" if note else r["release"]
        who = r.get("createdBy") or "-"
        rows.append((str(r["number"]), when(r["createdAt"]), who, r["outcome"], note))
    return rows


def rolled_back_line(name: str, to: int, revision: int) -> str:
    return f"application/{name} rolled back to revision {to} (revision {revision})"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


PROMPT_SOURCES = {
    "tokenizer": "sized with the model's own tokenizer",
    "estimate": "plain synthetic text, estimated at 4 bytes a token (no tokenizer reachable)",
    "audio": "a generated tone",
}


def benchmark_lines(run: Mapping[str, Any]) -> list[str]:
    """`app benchmark`: the run's state, its prompts, and a table of its levels."""
    head = f"application/{run['application']} revision {run['revision']} benchmark: {run['state']}"
    lines = [head]
    source = run.get("promptSource") or ""
    if source:
        tokens = f"{run['promptTokens']} tokens, " if source == "tokenizer" else ""
        lines.append(f"  prompts: {tokens}{PROMPT_SOURCES.get(source, source)}")
    if run.get("message"):
        lines.append(f"  {run['message']}")
    if run.get("levels"):
        rows = [
            ("CONCURRENCY", "REQUESTS", "ERRORS", "TOKENS/S", "TTFT P50/P95 MS", "ITL P50/P95 MS")
        ]
        for level in run["levels"]:
            rate = level.get("output_tokens_per_second")
            rows.append(
                (
                    str(level["concurrency"]),
                    str(level["requests"]),
                    str(level["errors"]),
                    "-" if rate is None else f"{rate:.1f}",
                    f"{_ms(level['ttft_p50_ms'])} / {_ms(level['ttft_p95_ms'])}",
                    f"{_ms(level['itl_p50_ms'])} / {_ms(level['itl_p95_ms'])}",
                )
            )
        lines.extend(table_lines(rows))
    return lines


BENCHMARK_HELP = "benchmark the running revision through the gateway (a few minutes at most)"
BENCHMARK_REVISION_HELP = (
    "during a Canary rollout: the revision to measure, its stable or its canary one (default: "
    "the stable one)"
)

# What `app restart|stop|start` do, said in every --help.
OPERATIONS = {
    "restart": "replace the replicas; storage, caches and settings stay",
    "stop": "stop serving and free the GPUs; the configuration stays",
    "start": "start a stopped application again",
}


# What `app promote|abort` do (a Canary rollout's decisions by hand).
ROLLOUT_DECISIONS = {
    "promote": "promote a Canary rollout's canary to every request now",
    "abort": "abort a Canary rollout: the canary stops, the stable revision takes all",
}


def rollout_lines(verb: str, name: str, rollout: Mapping[str, Any]) -> list[str]:
    """`app promote|abort`: the rollout's state and share after it, and the decision's words."""
    done = "promoted" if verb == "promote" else "aborted"
    lines = [
        f"application/{name} revision {rollout['canaryRevision']} {done}: {rollout['state']}, "
        f"{rollout['weight']}% of the requests"
    ]
    decisions = rollout.get("decisions") or []
    last = decisions[-1] if decisions else None
    if last and last.get("reason"):
        lines.append(f"  {last['reason']}")
    return lines


def deployed_lines(name: str, revision: int, outcome: str, reason: str | None) -> list[str]:
    """`app deploy`: the revision it deployed, its outcome, and why when there is a reason."""
    lines = [f"application/{name} revision {revision}: {outcome}"]
    if reason:
        lines.append(f"  {reason}")
    return lines


def operation_lines(verb: str, name: str, phase: str, reason: str | None) -> list[str]:
    lines = [f"application/{name} {verb}: {phase}"]
    if reason:
        lines.append(f"  {reason}")
    return lines


def deleting_lines(name: str, reason: str | None) -> list[str]:
    """A delete the cluster finishes: the application stays, Deleting, until it has."""
    return [f"application/{name} deleting", f"  {reason}"]


def deleted_line(name: str) -> str:
    return f"application/{name} deleted"


def left_on_cluster_line(left: str) -> str:
    return warning_line(left)


def no_log_lines(name: str, replica: int) -> str:
    return f"application/{name} replica {replica}: no log lines yet."


# --- status ------------------------------------------------------------------------------


def health_figures(health: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict (healthy, degraded, down) and the last five minutes' success rate and
    latency, from the health API's answer (`/applications/<name>/health`: `status`, and the
    figures of its window "5m")."""
    window = health["windows"]["5m"]
    return {
        "verdict": health["status"],
        "requests": window["requests"],
        "successRate": window["successRate"],
        "latencyP50Ms": window["latencyP50Ms"],
        "latencyP95Ms": window["latencyP95Ms"],
    }


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f} ms"


def status_lines(application: Mapping[str, Any], health: Mapping[str, Any]) -> list[str]:
    """`status NAME`: phase, reason and next step from the application (`/applications/<name>`),
    the verdict, success rate and latency from its health (`/applications/<name>/health`)."""
    spec, status = application["spec"], application["status"]
    lines = [f"application/{spec['name']}: {status['phase']}"]
    if status.get("reason"):
        lines.append(f"  reason:       {status['reason']}")
    if status.get("nextStep"):
        lines.append(f"  next step:    {status['nextStep']}")
    lines.append(f"  replicas:     {status['readyReplicas']}/{status['desiredReplicas']}")
    if status.get("scaling"):
        lines.append(f"  scaling:      {status['scaling']}")
    wakes = status.get("wakes")
    if wakes is not None:  # a model that sleeps (minReplicas 0)
        times = f" (wake time p50 {wakes['p50']}, p95 {wakes['p95']})" if wakes.get("p50") else ""
        lines.append(f"  wakes:        {wakes['count']}{times}")
    if status.get("endpoint"):
        lines.append(f"  endpoint:     {status['endpoint']}")
    figures = health_figures(health)
    rate = figures["successRate"]
    shown = "no requests" if rate is None else f"{rate * 100:.1f}%"
    lines.append(f"  health:       {figures['verdict']}")
    lines.append(
        f"  success rate: {shown} (last 5 minutes, {plural(figures['requests'], 'request')})"
    )
    lines.append(
        f"  latency:      p50 {_ms(figures['latencyP50Ms'])}, p95 {_ms(figures['latencyP95Ms'])}"
    )
    return lines


# --- API keys ------------------------------------------------------------------------------

SECRET_ONCE = "Copy it now: it is shown once; ServeDeck keeps only a hash of it."

# A key verb's field (the REST API's name) -> the option it comes from on the command line.
KEY_FLAGS = {
    "requestsPerMinute": "rpm",
    "tokensPerMinute": "tpm",
    "concurrentRequests": "concurrency",
    "expiresInDays": "expires-in",
    "graceMinutes": "grace",
    "applications": "app",
}


def key_flag(field: str) -> str:
    """The option a key verb's field came from (NAME is positional)."""
    return f"--{KEY_FLAGS[field]}" if field in KEY_FLAGS else field.upper()


def key_rows(keys: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """`key list`: the API's keys as a table with its header."""
    rows = [("NAME", "KEY", "APPLICATIONS", "STATE", "EXPIRES", "LAST USED", "REQUESTS 24H")]
    for key in keys:
        apps = "all" if key.get("applications") is None else ",".join(key["applications"])
        rows.append(
            (
                key["name"],
                key["prefix"],
                apps,
                key["state"],
                when(key.get("expiresAt")),
                when(key.get("lastUsedAt")),
                str(key.get("requests24h", 0)),
            )
        )
    return rows


def key_created_line(name: str) -> str:
    return f"apikey/{name} created; its key:"


def key_rotated_line(name: str, previous_expires_at: Any) -> str:
    return (
        f"apikey/{name} rotated; the old secret works until {when(previous_expires_at)} UTC. "
        "The new key:"
    )


def key_revoked_line(name: str, already: bool) -> str:
    return f"apikey/{name} was revoked already" if already else f"apikey/{name} revoked"


# --- Check model ---------------------------------------------------------------------------


def check_lines(answer: Mapping[str, Any]) -> list[str]:
    """Check model's answer (`/api/v1/models/check`, `CheckResult.as_dict()` with the texts
    the sizing core wrote) as `checkmodel` prints it; warnings last, with the word warning."""
    lines = [str(answer["verdict"])]
    if answer.get("next_step"):
        lines.append(f"  next step: {answer['next_step']}")
    suggestion = answer.get("suggestion") or {}
    parameters = answer.get("parameters")
    facts = [
        ("runtime", answer.get("runtime")),
        ("task", answer.get("task")),
        ("architecture", answer.get("architecture")),
        ("revision", answer.get("revision")),
        ("parameters", f"{parameters:,}" if parameters else None),
        ("weights", answer.get("weights_text")),
        (
            "max context",
            f"{answer['max_context_tokens']:,} tokens"
            if answer.get("max_context_tokens")
            else None,
        ),
        ("KV cache", answer.get("kv_cache_text")),
        ("memory needed", answer.get("memory_text")),
        ("suggested", suggestion.get("text")),
        ("weight cache", answer.get("cache_size")),
    ]
    for label, value in facts:
        if value:
            lines.append(f"  {label + ':':15} {value}")
    for unfit in answer.get("unfit") or []:
        lines.append(f"  not {unfit['gpu_kind']}: {unfit['reason']}")
    for warning in answer.get("warnings") or []:
        lines.append(warning_line(warning))
    return lines
