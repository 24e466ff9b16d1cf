"""The benchmark verb and its rows: start one on an application's running revision (a deployer's
decision; refused unless Running, and while another runs), run it on a worker thread of this
process (or in the caller's, for the command line), keep its figures per level, end it.

The load authenticates with a credential of its own (accesspolicies.secrets.BENCHMARK): minted
here, its hash on the Benchmark row for the gateway's snapshot, its plain text handed to the
worker only (never stored, shown or logged), good for one application until the plan's bound
(plan.Plan.max_seconds) and cleared when the run ends.

    run, secret = start(application, member)       # raises ActionError when refused
    run, secret = start(application, member, 3)    # revision 3: a Canary rollout's canary
    launch(run, secret)                            # the worker thread, after the commit
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accesspolicies import audit
from accesspolicies.models import ChangeCounter
from accesspolicies.secrets import BENCHMARK
from jobs.access import as_deployer
from jobs.deploy import ActionError
from jobs.gateway.signals import nudge
from jobs.live import groups
from jobs.models import Application, Benchmark, BenchmarkLevel, Event, Revision, Rollout
from jobs.overview import snippets
from jobs.rollouts import steps as rollouts
from jobs.status.phases import Phase

from . import load
from .plan import NoPlan, plan_for
from .stats import LevelFigures

logger = logging.getLogger(__name__)

OVERDUE = (
    "It did not finish by its deadline: the process running it stopped (the console "
    "restarted?). Start the benchmark again."
)
# After the load's own bound (plan.Plan.max_seconds), the time its figures take to be saved:
# a run is taken as stopped (and its credential refused) only past both.
FINISH_SECONDS = 30
# The figures a level keeps (BenchmarkLevel's columns, LevelFigures' fields).
FIGURES = (
    "concurrency",
    "requests",
    "errors",
    "seconds",
    "output_tokens",
    "output_tokens_per_second",
    "requests_per_second",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "latency_p50_ms",
    "latency_p95_ms",
)


def _serving_revision(application: Application) -> Revision | None:
    """The revision that runs: the newest one the backend applied that a Canary rollout did
    not start beside it or take back (during a rollout, the stable one)."""
    revisions = application.revisions.order_by("-number")
    applied = revisions.filter(outcome=Revision.Outcome.APPLIED)
    kept = applied.exclude(release__in=(rollouts.CANARY, rollouts.ROLLED_BACK, rollouts.ABORTED))
    return kept.first() or applied.first() or revisions.first()


def _chosen_revision(application: Application, number: int | None) -> Revision | None:
    """The revision a benchmark measures: `number`, the serving revision's or, during a
    Canary rollout, its stable or canary revision's (the gateway sends the load to that one
    only: jobs.gateway.split.pick); None: the serving one."""
    serving = _serving_revision(application)
    if number is None:
        return serving
    if not 1 <= number <= 2**31:
        number = 0  # said as "revision 0", not echoed at any length
    rollout = rollouts.active_rollout(application)
    accepted = (
        (rollout.stable_revision, rollout.canary_revision)
        if rollout is not None
        else (serving.number,)
        if serving is not None
        else ()
    )
    if number not in accepted:
        during = " (the stable and the canary revisions of its rollout)" if rollout else ""
        listing = " or ".join(str(n) for n in accepted) or "none"
        raise ActionError(
            "revision",
            f"{application.name} does not serve revision {number}; a benchmark measures a "
            f"revision that serves: accepts {listing}{during}. Name one of those, or none for "
            "the serving revision.",
        )
    if rollout is not None and number == rollout.canary_revision:
        if rollout.canary_phase != Phase.RUNNING or not rollout.canary_endpoints:
            raise ActionError(
                "revision",
                f"revision {number} of {application.name} is the canary of a rollout, and "
                f"it is not serving yet ({rollout.canary_phase or 'Pending'}); benchmark it "
                "once it is Running.",
                409,
            )
    elif rollout is not None and rollout.state == Rollout.State.PROMOTING:
        raise ActionError(
            "revision",
            f"revision {number} of {application.name} is being replaced by revision "
            f"{rollout.canary_revision}, which is promoted; benchmark revision "
            f"{rollout.canary_revision} instead.",
            409,
        )
    return application.revisions.get(number=number)


def end_overdue(application: Application) -> int:
    """Mark Failed the runs of `application` still Running past their deadline (their worker
    stopped with its process); how many."""
    now = timezone.now()
    return Benchmark.objects.filter(
        application=application, state=Benchmark.State.RUNNING, deadline__lte=now
    ).update(
        state=Benchmark.State.FAILED, message=OVERDUE, finished_at=now, lookup="", secret_hash=""
    )


def start(
    application: Application, member, revision_number: int | None = None
) -> tuple[Benchmark, str]:
    """A new running benchmark of the application's serving revision (or of revision
    `revision_number`: during
    a Canary rollout the stable or the canary one) and its credential's plain text (for
    `launch` or `execute` only). Refused (ActionError naming the field, what is wrong and what
    to do) for a role that may not deploy (403), a task with no benchmark or a revision that
    does not serve (400), an application not Running, a canary not serving yet or a benchmark
    running (409)."""
    deployer = as_deployer(member)
    try:
        plan = plan_for(snippets.application_task(application.manifest))
    except NoPlan as error:
        raise ActionError("application", f"{application.name}: {error}") from None
    if application.phase != Phase.RUNNING:
        raise ActionError(
            "application",
            f"{application.name} is {application.phase}, not Running: a benchmark measures "
            "a running revision. Start it, or wait until it is Running, then benchmark it.",
            409,
        )
    revision = _chosen_revision(application, revision_number)
    if revision is None:
        raise ActionError("application", f"{application.name} has no revision to measure.", 409)
    end_overdue(application)
    minted = BENCHMARK.mint()
    user = deployer.membership.user
    try:
        with transaction.atomic():
            run = Benchmark.objects.create(
                application=application,
                revision=revision,
                started_by=user,
                task=plan.task,
                route=plan.route,
                deadline=timezone.now() + timedelta(seconds=plan.max_seconds + FINISH_SECONDS),
                lookup=minted.lookup,
                secret_hash=minted.digest,
            )
            ChangeCounter.bump()  # the gateways learn the credential
            audit.record(
                application.organization,
                user,
                "application.benchmark",
                "application",
                application.name,
                {"revision": revision.number, "task": plan.task},
            )
    except IntegrityError:
        raise ActionError("application", _already_running(application), 409) from None
    transaction.on_commit(nudge)
    transaction.on_commit(lambda: _tell_pages(application))
    return run, minted.plain


def _tell_pages(application: Application) -> None:
    """The model's live pages show the run under way, or its results (never raises)."""
    groups.send([(groups.application_group(application.pk), {"type": "benchmark.update"})])


def _already_running(application: Application) -> str:
    running = (
        Benchmark.objects.filter(application=application, state=Benchmark.State.RUNNING)
        .select_related("started_by")
        .first()
    )
    started = ""
    if running is not None:
        who = running.started_by.get_username() if running.started_by else "someone"
        started = f" (started {running.created_at:%H:%M:%S} UTC by {who})"
    return (
        f"a benchmark of {application.name} is running already{started}; one runs at a time. "
        "Wait for its results on the model's page (a run takes at most a few minutes), then "
        "start another."
    )


def launch(run: Benchmark, secret: str) -> threading.Thread:
    """Run it on a worker thread of this process, once the transaction that made it commits
    (the worker's own connection must see the row)."""
    thread = threading.Thread(
        target=_in_thread, args=(run.pk, secret), name=f"servedeck-benchmark-{run.pk}", daemon=True
    )
    transaction.on_commit(thread.start)
    return thread


def _in_thread(run_id: int, secret: str) -> None:
    try:
        execute(run_id, secret)
    finally:
        connection.close()  # a worker thread's connection ends with it


def execute(run_id: int, secret: str, meter=None) -> Benchmark:
    """Run the load and keep its figures; the run ends Succeeded or Failed whatever happens."""
    run = Benchmark.objects.select_related("application", "revision").get(pk=run_id)
    application = run.application
    try:
        plan = plan_for(run.task)
        coroutine = load.run(plan, application.name, application.organization_id, secret, meter)
        outcome = asyncio.run(coroutine)
    except TimeoutError:
        why = f"The load ran past its bound ({plan.max_seconds:.0f} s) and was stopped."
        return _finish(run, [], Benchmark.State.FAILED, why)
    except Exception as error:
        logger.exception("the benchmark %s of %s failed", run.pk, application.name)
        why = f"The load stopped on an unexpected error ({type(error).__name__}: {error})"
        return _finish(run, [], Benchmark.State.FAILED, why[:500])
    requests = sum(level.requests for level in outcome.levels)
    errors = sum(level.errors for level in outcome.levels)
    run.prompt_source, run.prompt_tokens = outcome.prompt_source, outcome.prompt_tokens
    if requests and errors == requests:
        message = f"Every request failed; the first: {outcome.first_error}"[:500]
        return _finish(run, outcome.levels, Benchmark.State.FAILED, message)
    message = f"{errors} of {requests} requests failed; the first: {outcome.first_error}"
    return _finish(run, outcome.levels, Benchmark.State.SUCCEEDED, message[:500] if errors else "")


def _finish(run: Benchmark, levels: list[LevelFigures], state: str, message: str) -> Benchmark:
    succeeded = state == Benchmark.State.SUCCEEDED
    with transaction.atomic():
        if not Benchmark.objects.select_for_update().filter(pk=run.pk).exists():
            return run  # its application was deleted while it ran: nothing to keep
        for figures in levels:
            values = {name: getattr(figures, name) for name in FIGURES}
            BenchmarkLevel.objects.create(benchmark=run, **values)
        run.state, run.message, run.finished_at = state, message, timezone.now()
        run.lookup = run.secret_hash = ""  # the credential ends with the run
        run.save()
        ChangeCounter.bump()
        Event.objects.create(
            application=run.application,
            reason="Benchmarked" if succeeded else "BenchmarkFailed",
            kind=Event.Kind.NORMAL if succeeded else Event.Kind.WARNING,
            message=f"Benchmark of revision {run.revision.number}: {state}. {message}".strip(),
        )
    transaction.on_commit(nudge)
    transaction.on_commit(lambda: _tell_pages(run.application))
    return run
