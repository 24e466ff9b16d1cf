"""`manage.py app …`: apply, get, list, history, rollback, deploy and delete applications.

The same verbs as the REST API. Refusals print every problem and exit 1; warnings print with
the word "warning" and exit 0.
"""

import json
import sys
from pathlib import Path

import yaml
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from accesspolicies import audit
from accesspolicies.cli import acting_membership, add_verb
from jobs import deploy as verbs
from jobs.access import get_application, get_profile
from jobs.manifest.bounded import MANIFEST_LIMITS
from jobs.models import Application
from jobs.present import described, dry_run_body, local_profile_note
from jobs.render import RenderError, render_for_profile, to_json, to_yaml

OPERATIONS = {
    "restart": "replace the replicas; storage, caches and settings stay",
    "stop": "stop serving and free the GPUs; the configuration stays",
    "start": "start a stopped application again",
}


def dump(data, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, default=str)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


class Command(BaseCommand):
    help = (
        "Manage applications from a manifest: apply, get, list, history, rollback, deploy, delete."
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
                else:
                    getattr(self, f"do_{verb}")(membership, **options)
        except verbs.Refused as refused:
            self._report(refused.dry_run)
            count = len(refused.dry_run.refusals)
            raise CommandError(
                f"refused: {count} problem{'s' * (count != 1)}", returncode=1
            ) from None
        except (verbs.ActionError, Http404, PermissionDenied) as error:
            raise CommandError(str(error), returncode=1) from None

    def _report(self, run) -> None:
        for problem in run.refusals:
            self.stderr.write(f"error: {problem}")
        for problem in run.warnings:
            self.stderr.write(self.style.WARNING(f"warning: {problem}"))

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
            Application.objects.for_member(membership, "deploy")
            run = verbs.dry_run(text, membership.organization)
            if not run.ok:
                raise verbs.Refused(run)
            self._report(run)
            if output:
                self.stdout.write(dump(dry_run_body(run), output))
                return
            name = run.manifest["spec"]["name"]
            action = ("update" if run.exists else "create") if run.changed else "unchanged"
            self.stdout.write(f"dry run: application/{name} would be: {action}; nothing saved.")
            self.stdout.write(f"  runtime: {run.runtime}\n  scaling: {run.scaling}")
            if run.check is not None:
                self.stdout.write(f"  check model: {run.check.verdict}")
                if run.check.suggestion:
                    self.stdout.write(f"  suggested size: {run.check.suggestion.describe()}")
            return
        applied = verbs.apply(text, membership)
        self._report(applied.dry_run)
        name = applied.application.name
        if applied.revision is None:
            self.stdout.write(f"application/{name} unchanged")
        else:
            action = "created" if applied.created else "configured"
            self.stdout.write(f"application/{name} {action} (revision {applied.revision.number})")
        if output:
            self.stdout.write(dump(described(applied.application), output))

    def do_render(self, membership, filename, output, **_):
        """Like `helm template`: the objects for the manifest's profile, on a Kubernetes cluster
        with the same machine catalog even when the profile runs on the local backend. It is a
        dry run, so a deployer's, like `apply --dry-run`."""
        Application.objects.for_member(membership, "deploy")
        run = verbs.dry_run(self._read(filename), membership.organization)
        if not run.ok:
            raise verbs.Refused(run)
        self._report(run)
        profile = get_profile(membership, run.manifest["spec"]["profileName"])
        try:
            objects = render_for_profile(run.manifest, profile)
        except RenderError as error:
            raise CommandError(f"cannot render: {error}", returncode=1) from None
        if profile.cluster.backend == profile.cluster.Backend.LOCAL:
            self.stderr.write(local_profile_note(profile.name))
        self.stdout.write(to_json(objects) if output == "json" else to_yaml(objects))

    def do_get(self, membership, name, output, **_):
        self.stdout.write(dump(described(get_application(membership, name)), output))

    def do_list(self, membership, **_):
        apps = Application.objects.for_member(membership)
        rows = [("NAME", "PHASE", "PROFILE", "MODEL", "REPLICAS", "LAST DEPLOYED")]
        for app in apps.select_related("profile"):
            deployed = app.deployed_at.strftime("%Y-%m-%d %H:%M") if app.deployed_at else "never"
            replicas = f"{app.ready_replicas}/{app.desired_replicas}"
            rows.append((app.name, app.phase, app.profile.name, app.model_uri, replicas, deployed))
        self._table(rows)

    def do_history(self, membership, name, **_):
        application = get_application(membership, name)
        rows = [("REVISION", "WHEN", "WHO", "OUTCOME", "NOTE")]
        for r in application.revisions.select_related("created_by"):
            note = f"rollback to {r.rolled_back_from}" if r.rolled_back_from else ""
            who = r.created_by.get_username() if r.created_by else "-"
            rows.append(
                (str(r.number), r.created_at.strftime("%Y-%m-%d %H:%M"), who, r.outcome, note)
            )
        self._table(rows)

    def do_rollback(self, membership, name, to, **_):
        application = get_application(membership, name, "deploy")
        applied = verbs.rollback(application, to, membership)
        self._report(applied.dry_run)
        self.stdout.write(
            f"application/{name} rolled back to revision {to} (revision {applied.revision.number})"
        )

    def do_deploy(self, membership, name, **_):
        application = get_application(membership, name, "deploy")
        revision = verbs.deploy_latest(application, membership)
        self.stdout.write(f"application/{name} revision {revision.number}: {revision.outcome}")
        if application.reason:
            self.stdout.write(f"  {application.reason}")

    def operate(self, verb: str, membership, name: str) -> None:
        observed = getattr(verbs, verb)(get_application(membership, name, "deploy"), membership)
        self.stdout.write(f"application/{name} {verb}: {observed.phase}")
        if observed.reason:
            self.stdout.write(f"  {observed.reason}")

    def do_delete(self, membership, name, keep_on_cluster=False, **_):
        application = get_application(membership, name, "deploy")
        left = verbs.delete(application, membership, keep_on_cluster=keep_on_cluster)
        if application.pk is not None:  # Deleting: the cluster removes its objects
            self.stdout.write(f"application/{name} deleting")
            self.stdout.write(f"  {application.reason}")
            return
        self.stdout.write(f"application/{name} deleted")
        if left:
            self.stderr.write(self.style.WARNING(f"warning: {left}"))

    def _table(self, rows) -> None:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
