"""`manage.py app …`: apply, get, list, history, rollback, deploy, benchmark and delete
applications, and promote or abort a Canary rollout.

The same verbs as the REST API. Refusals print every problem and exit 1; warnings print with
the word "warning" and exit 0.
"""

import sys
from pathlib import Path

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError
from django.http import Http404
from servedeck import present
from servedeck.present import OPERATIONS, ROLLOUT_DECISIONS, dump, rollout_lines

from accesspolicies import audit
from accesspolicies.cli import ServeDeckCommand, acting_membership, add_verb
from jobs import deploy as verbs
from jobs.access import application_to_change, as_deployer, get_application
from jobs.benchmark import runs as benchmark_runs
from jobs.benchmark import shown as benchmark_shown
from jobs.manifest.bounded import MANIFEST_LIMITS
from jobs.models import Application
from jobs.present import (
    described,
    dry_run_body,
    history,
    local_profile_note,
    rollout_body,
    summary,
)
from jobs.render import RenderError, to_json, to_yaml


class Command(ServeDeckCommand):
    help = (
        "Manage applications from a manifest: apply, get, list, history, rollback, deploy, "
        "benchmark, delete."
    )

    def add_arguments(self, parser):
        verbs_ = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        apply = add_verb(verbs_, "apply", help="create or update from a manifest file")
        apply.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
        apply.add_argument("--dry-run", action="store_true", help="check it; save nothing")
        apply.add_argument("-o", "--output", choices=["yaml", "json"])
        render = add_verb(verbs_, "render", help="the Kubernetes objects a manifest renders into")
        render.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
        render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
        get = add_verb(verbs_, "get", help="the manifest with every default filled in")
        get.add_argument("name")
        get.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
        add_verb(verbs_, "list", help="the organisation's applications")
        history = add_verb(verbs_, "history", help="deploy history")
        history.add_argument("name")
        rollback = add_verb(verbs_, "rollback", help="apply an earlier revision as a new one")
        rollback.add_argument("name")
        rollback.add_argument("--to", type=int, required=True, metavar="N", help="revision number")
        deploy = add_verb(verbs_, "deploy", help="deploy the latest revision (syncType Manual)")
        deploy.add_argument("name")
        for verb, text in OPERATIONS.items():
            add_verb(verbs_, verb, help=text).add_argument("name")
        for verb, text in ROLLOUT_DECISIONS.items():
            add_verb(verbs_, verb, help=text).add_argument("name")
        benchmark = add_verb(verbs_, "benchmark", help=present.BENCHMARK_HELP)
        benchmark.add_argument("name")
        benchmark.add_argument(
            "--revision", type=int, metavar="N", help=present.BENCHMARK_REVISION_HELP
        )
        logs = add_verb(verbs_, "logs", help="the last lines of a replica's model server log")
        logs.add_argument("name")
        logs.add_argument("--lines", type=int, default=100, metavar="N", help="1 to 1000")
        logs.add_argument("--replica", type=int, default=0, metavar="R", help="which replica")
        delete = add_verb(verbs_, "delete", help="delete an application and all it runs")
        delete.add_argument("name")
        delete.add_argument(
            "--keep-on-cluster",
            action="store_true",
            help="when its cluster does not answer, delete it from the console anyway",
        )

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user)
        try:
            with audit.cli_origin():
                if verb in OPERATIONS:
                    self.operate(verb, membership, options["name"])
                elif verb in ROLLOUT_DECISIONS:
                    self.decide(verb, membership, options["name"])
                else:
                    getattr(self, f"do_{verb}")(membership, **options)
        except verbs.Refused as refused:
            self._report(refused.dry_run)
            summary_line = present.refused_summary(len(refused.dry_run.refusals))
            raise CommandError(summary_line, returncode=1) from None
        except (verbs.ActionError, Http404, PermissionDenied) as error:
            raise CommandError(str(error), returncode=1) from None

    def _report(self, run) -> None:
        for problem in run.refusals:
            self.stderr.write(present.terminal_safe(present.problem_line(problem.as_dict())))
        for problem in run.warnings:
            line = present.terminal_safe(present.problem_line(problem.as_dict()))
            self.stderr.write(self.style.WARNING(line))

    def _read(self, filename: str) -> str | bytes:
        """The file's bytes, at most one more than a manifest may hold (the dry run refuses
        more, and a non-UTF-8 file, with a message): /dev/zero never fills the memory."""
        limit = MANIFEST_LIMITS.max_bytes + 1
        if filename == "-":
            stream = getattr(sys.stdin, "buffer", sys.stdin)
            return stream.read(limit)
        try:
            with Path(filename).open("rb") as handle:
                return handle.read(limit)
        except OSError as error:
            raise CommandError(f"-f {filename}: cannot read it ({error.strerror}).") from None

    def do_apply(self, membership, filename, dry_run, output, **_):
        text = self._read(filename)
        if dry_run:
            # the REST API's decision: a dry run is a deployer's (a viewer may not, bug 4)
            as_deployer(membership)
            run = verbs.dry_run(text, membership.organization)
            if not run.ok:
                raise verbs.Refused(run)
            self._report(run)
            if output:
                self.stdout.write(dump(dry_run_body(run), output))
                return
            self._lines(present.dry_run_lines(dry_run_body(run)))
            return
        applied = verbs.apply(text, membership)
        self._report(applied.dry_run)
        number = applied.revision.number if applied.revision else None
        self.stdout.write(present.applied_line(applied.application.name, applied.action, number))
        if output:
            self.stdout.write(dump(described(applied.application), output))

    def do_render(self, membership, filename, output, **_):
        """Like `helm template`: jobs.deploy.render, printed."""
        try:
            rendered = verbs.render(self._read(filename), membership)
        except RenderError as error:
            raise CommandError(f"cannot render: {error}", returncode=1) from None
        self._report(rendered.dry_run)
        profile = rendered.profile
        if profile.cluster.backend == profile.cluster.Backend.LOCAL:
            self.stderr.write(local_profile_note(profile.name))
        objects = rendered.objects
        self.stdout.write(to_json(objects) if output == "json" else to_yaml(objects))

    def do_get(self, membership, name, output, **_):
        self.stdout.write(dump(described(get_application(membership, name)), output))

    def do_list(self, membership, **_):
        apps = Application.objects.for_member(membership).select_related("profile")
        self._lines(present.table_lines(present.application_rows(summary(a) for a in apps)))

    def do_history(self, membership, name, **_):
        revisions = history(get_application(membership, name))
        self._lines(present.table_lines(present.history_rows(revisions)))

    def do_rollback(self, membership, name, to, **_):
        application, deployer = application_to_change(membership, name)
        applied = verbs.rollback(application, to, deployer)
        self._report(applied.dry_run)
        self.stdout.write(present.rolled_back_line(name, to, applied.revision.number))

    def do_deploy(self, membership, name, **_):
        application, deployer = application_to_change(membership, name)
        revision = verbs.deploy_latest(application, deployer)
        self._lines(
            present.deployed_lines(name, revision.number, revision.outcome, application.reason)
        )

    def operate(self, verb: str, membership, name: str) -> None:
        observed = getattr(verbs, verb)(*application_to_change(membership, name))
        self._lines(present.operation_lines(verb, name, observed.phase, observed.reason))

    def decide(self, verb: str, membership, name: str) -> None:
        rollout = getattr(verbs, verb)(*application_to_change(membership, name))
        self._lines(rollout_lines(verb, name, rollout_body(rollout)))

    def do_logs(self, membership, name, lines, replica, **_):
        found = verbs.logs(get_application(membership, name, "deploy"), lines, replica).lines
        self._lines(found)
        if not found:
            self.stderr.write(present.no_log_lines(name, replica))

    def do_benchmark(self, membership, name, revision=None, **_):
        """Runs in this process, in the foreground: the command is the worker."""
        application, deployer = application_to_change(membership, name)
        run, secret = benchmark_runs.start(application, deployer, revision)
        self.stderr.write(f"benchmarking {name} revision {run.revision.number} (until the end)")
        run = benchmark_runs.execute(run.pk, secret)
        self._lines(present.benchmark_lines(benchmark_shown.body(run)))
        if run.state != run.State.SUCCEEDED:
            raise CommandError(f"the benchmark of {name} failed.", returncode=1)

    def do_delete(self, membership, name, keep_on_cluster=False, **_):
        application, deployer = application_to_change(membership, name)
        left = verbs.delete(application, deployer, keep_on_cluster=keep_on_cluster)
        if application.pk is not None:  # Deleting: the cluster removes its objects
            self._lines(present.deleting_lines(name, application.reason))
            return
        self.stdout.write(present.deleted_line(name))
        if left:
            self.stderr.write(self.style.WARNING(present.left_on_cluster_line(left)))

    def _lines(self, lines) -> None:
        """Lines to the terminal, made safe as the client makes them (a log line or a reason
        may hold what a model server or its callers wrote)."""
        for line in lines:
            self.stdout.write(present.terminal_safe(line))
