"""REST endpoints for applications: list, create, get, update, delete, history, rollback, deploy.

Manifests are sent as the raw body, JSON or YAML; `?dryRun=true` answers the dry run and saves
nothing. The views only translate HTTP to the verbs in jobs.deploy.
"""

from datetime import datetime

from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from console.api_errors import errors
from jobs import deploy as verbs
from jobs.access import application_to_change, as_deployer, get_application
from jobs.benchmark import runs as benchmark_runs
from jobs.benchmark import shown as benchmark_shown
from jobs.benchmark.shown import body as benchmark_body
from jobs.manifest.json_schema import manifest_json_schema
from jobs.models import Application, Phase
from jobs.present import described, dry_run_body, local_profile_note, rollout_body, summary
from jobs.present import history as revision_history
from jobs.render import RenderError, to_json, to_yaml

router = Router(tags=["applications"])

MANIFEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "An Application manifest (docs/manifest.md), as JSON or YAML. The schema "
        "says the fields and their static ranges; the dry run checks everything else.",
        "content": {
            "application/json": {"schema": manifest_json_schema()},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


class Problem(Schema):
    path: str
    message: str
    level: str
    origin: str  # schema, rule, check-model or target


class DeletedOut(Schema):
    name: str
    leftOnCluster: str


class DeletingOut(Schema):
    name: str
    phase: str
    reason: str


class ApplicationSummary(Schema):
    name: str
    phase: str
    profile: str
    model: str
    readyReplicas: int
    desiredReplicas: int
    endpoint: str
    deployedAt: datetime | None


class ApplicationOut(Schema):
    apiVersion: str
    kind: str
    spec: dict
    status: dict


class ApplyOut(Schema):
    action: str
    revision: int | None
    warnings: list[Problem]
    application: ApplicationOut


class DryRunOut(Schema):
    ok: bool
    action: str
    refusals: list[Problem]
    warnings: list[Problem]
    runtime: str | None
    scaling: str | None
    # What minReplicas 0 (scale to zero) means on the profile's target; null when it never sleeps.
    sleeping: str | None = None
    checkModel: dict | None  # Check model's answer, as /api/v1/models/check gives it
    objects: list[dict]  # what a Kubernetes profile's cluster gets (empty on local)
    manifest: dict | None


class RevisionOut(Schema):
    number: int
    createdAt: datetime
    createdBy: str | None
    outcome: str
    message: str
    rolledBackFrom: int | None
    release: str = ""  # a Canary rollout's mark: Canary, Promoted, Rolled back, Aborted
    manifest: dict


class RollbackIn(Schema):
    revision: int


def _apply(request, dry_run: bool, expect_name=None, create_only=False):
    # The decision `app apply [--dry-run]` makes too: applying or dry-running is a deployer's.
    # Made here, before the body is read, and once: apply takes the Deployer.
    deployer = as_deployer(request.auth)
    body = request.body
    if dry_run:
        run = verbs.dry_run(body, deployer.membership.organization, expect_name=expect_name)
        if not run.ok:
            raise verbs.Refused(run)
        return Status(200, dry_run_body(run))
    applied = verbs.apply(body, deployer, expect_name=expect_name, create_only=create_only)
    body = {
        "action": applied.action,
        "revision": applied.revision.number if applied.revision else None,
        "warnings": [p.as_dict() for p in applied.dry_run.warnings],
        "application": described(applied.application),
    }
    return Status(201 if applied.created else 200, body)


@router.get("", response=list[ApplicationSummary], summary="List applications")
def list_applications(request):
    apps = Application.objects.for_member(request.auth)
    return [summary(app) for app in apps.select_related("profile")]


@router.post(
    "",
    response={200: DryRunOut, 201: ApplyOut, **errors(400, 409)},
    openapi_extra=MANIFEST_BODY,
    summary="Create an application (or dry-run it)",
)
def create_application(request, dryRun: bool = False):  # noqa: N803 (the query name clients use)
    return _apply(request, dryRun, create_only=True)


class RenderOut(Schema):
    objects: list[dict]
    text: str  # the objects as `app render -o yaml|json` prints them
    warnings: list[Problem]
    note: str | None  # what a profile on the local backend does with these objects


@router.post(
    "/render",
    response={200: RenderOut, **errors(400)},
    openapi_extra=MANIFEST_BODY,
    summary="The Kubernetes objects a manifest renders into (saves nothing)",
)
def render(request, output: str = "yaml"):
    if output not in ("yaml", "json"):
        raise HttpError(422, f"output is {output[:20]!r}; accepts yaml or json.")
    try:
        rendered = verbs.render(request.body, request.auth)
    except RenderError as error:
        raise HttpError(400, f"cannot render: {error}") from None
    profile = rendered.profile
    local = profile.cluster.backend == profile.cluster.Backend.LOCAL
    return {
        "objects": rendered.objects,
        "text": to_json(rendered.objects) if output == "json" else to_yaml(rendered.objects),
        "warnings": [p.as_dict() for p in rendered.dry_run.warnings],
        "note": local_profile_note(profile.name) if local else None,
    }


@router.get("/{name}", response=ApplicationOut, summary="Get an application, defaults filled in")
def get(request, name: str):
    return described(get_application(request.auth, name))


@router.put(
    "/{name}",
    response={200: DryRunOut | ApplyOut, **errors(400, 409)},
    openapi_extra=MANIFEST_BODY,
    summary="Update an application (or dry-run the change)",
)
def update_application(request, name: str, dryRun: bool = False):  # noqa: N803
    get_application(request.auth, name)  # 404 before 403, as for every named application
    return _apply(request, dryRun, expect_name=name)


@router.delete(
    "/{name}",
    response={204: None, 200: DeletedOut, 202: DeletingOut, **errors(400, 503)},
    summary="Delete an application",
    description="204 when it is gone; 202 while the cluster removes its objects (phase "
    "Deleting: it disappears once they are gone). With keepOnCluster=true, an application "
    "whose cluster does not answer is deleted from the console anyway (200, saying what may "
    "still run on the cluster).",
)
def delete_application(request, name: str, keepOnCluster: bool = False):  # noqa: N803
    application, deployer = application_to_change(request.auth, name)
    left = verbs.delete(application, deployer, keep_on_cluster=keepOnCluster)
    if left:
        return Status(200, {"name": name, "leftOnCluster": left})
    if application.phase == Phase.DELETING and application.pk is not None:
        body = {"name": name, "phase": application.phase, "reason": application.reason}
        return Status(202, body)
    return Status(204, None)


@router.get("/{name}/history", response=list[RevisionOut], summary="Deploy history")
def history(request, name: str):
    return revision_history(get_application(request.auth, name))


@router.post(
    "/{name}/rollback",
    response={200: ApplyOut, **errors(400)},
    summary="Apply an earlier revision again, as a new revision",
)
def rollback(request, name: str, body: RollbackIn):
    application, deployer = application_to_change(request.auth, name)
    applied = verbs.rollback(application, body.revision, deployer)
    return {
        "action": "updated",
        "revision": applied.revision.number,
        "warnings": [p.as_dict() for p in applied.dry_run.warnings],
        "application": described(applied.application),
    }


def _operation(verb: str, summary: str):
    @router.post(
        f"/{{name}}/{verb}",
        response={200: ApplicationOut, **errors(400, 503)},
        summary=summary,
        operation_id=verb,
    )
    def operate(request, name: str):
        application, deployer = application_to_change(request.auth, name)
        getattr(verbs, verb)(application, deployer)
        return described(application)

    return operate


_operation("restart", "Replace the replicas; storage, caches and settings stay")
_operation("stop", "Stop serving and free the GPUs; the configuration stays")
_operation("start", "Start a stopped application again")


class RolloutOut(Schema):
    state: str
    stableRevision: int
    canaryRevision: int
    weight: int
    step: int
    steps: list[int]
    stepStartedAt: datetime | None
    canaryPhase: str
    decisions: list[dict]


@router.get(
    "/{name}/rollout",
    response={200: RolloutOut, **errors(404)},
    summary="The latest Canary rollout: its split, step and decisions",
)
def rollout(request, name: str):
    application = get_application(request.auth, name)
    found = application.rollouts.order_by("-created_at", "-id").first()
    if found is None:
        raise HttpError(
            404,
            f"{name} has had no Canary rollout; deploy a manifest with spec.rollout.strategy "
            "Canary to start one.",
        )
    return rollout_body(found)


def _decide(verb: str, summary: str):
    @router.post(
        f"/{{name}}/{verb}",
        response={200: RolloutOut, **errors(400, 409)},
        summary=summary,
        operation_id=verb,
    )
    def decide(request, name: str):
        application, deployer = application_to_change(request.auth, name)
        return rollout_body(getattr(verbs, verb)(application, deployer))

    return decide


_decide("promote", "Promote a Canary rollout's canary to every request now")
_decide("abort", "Abort a Canary rollout: the canary stops, the stable revision takes all")


@router.post("/{name}/deploy", response=ApplicationOut, summary="Deploy the latest revision")
def deploy(request, name: str):
    application, deployer = application_to_change(request.auth, name)
    verbs.deploy_latest(application, deployer)
    return described(application)


class LogSpan(Schema):
    lines: int = Field(100, ge=1, le=verbs.MAX_LOG_LINES, description="How many lines, last first.")
    replica: int = Field(0, ge=0, description="Which replica's model server (0 is the first).")
    # Bounded and read where it is used (replica_logs.parse_cursor): a bad one is a 400 that
    # says what a cursor looks like, whatever its length.
    after: str | None = Field(
        None,
        description="A cursor an earlier answer gave: only the lines written since (the "
        "oldest first, at most `lines`), each once however often its text repeats. "
        "b<digits>.<digits> on the console's machine, t<digits>.<digits> for a pod.",
    )


class LogsOut(Schema):
    name: str
    replica: int
    lines: list[str]
    cursor: str | None = Field(description="Send it as `after` to get the lines after these.")


MAX_LINE = 4000  # characters of one log line sent back, never more


@router.get(
    "/{name}/logs",
    response={200: LogsOut, **errors(400, 503)},
    summary="The last lines of a replica's model server log, secrets redacted",
)
def logs(request, name: str, span: Query[LogSpan]):
    application = get_application(request.auth, name, "deploy")
    found = verbs.logs(application, span.lines, span.replica, span.after)
    return {
        "name": name,
        "replica": span.replica,
        "lines": [x[:MAX_LINE] for x in found.lines],
        "cursor": found.cursor,
    }


class BenchmarkLevelOut(Schema):
    concurrency: int
    requests: int
    errors: int
    seconds: float
    output_tokens: int
    output_tokens_per_second: float | None
    requests_per_second: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None


class BenchmarkOut(Schema):
    id: int
    application: str
    revision: int
    task: str
    route: str
    state: str
    message: str
    promptSource: str
    promptTokens: int
    maxOutputTokens: int
    startedBy: str | None
    createdAt: datetime
    finishedAt: datetime | None
    deadline: datetime
    levels: list[BenchmarkLevelOut]


@router.post(
    "/{name}/benchmarks",
    response={202: BenchmarkOut, **errors(400, 409)},
    summary="Benchmark the running revision (in the background)",
    description="Starts a short bounded load through the gateway (docs/benchmarks.md) and "
    "answers at once with the run, state Running; read it again at GET .../benchmarks/{id}. "
    "409 when the application is not Running or a benchmark of it runs already. During a "
    "Canary rollout `?revision=N` measures its stable or its canary revision (the load goes "
    "to that one only); the stable one by default.",
)
def start_benchmark(request, name: str, revision: int | None = None):
    application, deployer = application_to_change(request.auth, name)
    run, secret = benchmark_runs.start(application, deployer, revision)
    benchmark_runs.launch(run, secret)
    return Status(202, benchmark_body(run))


@router.get(
    "/{name}/benchmarks", response=list[BenchmarkOut], summary="Benchmarks, the 20 newest first"
)
def list_benchmarks(request, name: str):
    return [
        benchmark_body(run) for run in benchmark_shown.runs_of(get_application(request.auth, name))
    ]


@router.get("/{name}/benchmarks/{benchmark_id}", response=BenchmarkOut, summary="One benchmark")
def get_benchmark(request, name: str, benchmark_id: int):
    application = get_application(request.auth, name)
    benchmark_runs.end_overdue(application)  # a run whose process stopped reads Failed
    run = application.benchmarks.filter(pk=benchmark_id).first()
    if run is None:
        raise HttpError(
            404, f"{name} has no benchmark {benchmark_id}; GET .../benchmarks lists them."
        )
    return benchmark_body(run)
