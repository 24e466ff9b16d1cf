"""`manage.py checkmodel URI`: whether the platform can serve a model, and on what.

Exit status 0 when it can serve, 1 when it cannot (or the Hub could not be asked).
"""

import json

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError
from django.http import Http404
from servedeck import present

from accesspolicies.cli import ServeDeckCommand, acting_membership
from jobs.access import ProfileNeeded, profile_or_only
from jobs.dry_run import check_for_profile


class Command(ServeDeckCommand):
    help = "Check model: can the platform serve it, which runtime, how much memory, which GPUs."

    def add_arguments(self, parser):
        parser.add_argument(
            "uri", help="hf://org/repo[:revision], s3://…, gs://…, pvc://…, oci://…"
        )
        parser.add_argument("--profile", help="the profile whose catalog and token to use")
        parser.add_argument("--context", type=int, help="context length to size memory for")
        parser.add_argument("--concurrency", type=int, default=1, help="requests at once")
        parser.add_argument("--format", help="the model format, for anything but hf://")
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="print the whole answer as JSON"
        )
        parser.add_argument("--org")
        parser.add_argument("--user")

    def handle(self, *args, uri, profile, context, concurrency, format, as_json, org, user, **_):
        membership = acting_membership(org, user)
        try:
            chosen = profile_or_only(membership, profile)
        except (Http404, PermissionDenied, ProfileNeeded) as error:
            raise CommandError(f"--profile: {error}") from None
        result = check_for_profile(
            uri, chosen, context_tokens=context, concurrency=max(1, concurrency), format=format
        )
        if as_json:
            self.stdout.write(
                json.dumps({"profile": chosen.name, **result.as_dict()}, indent=2, default=str)
            )
        else:
            self._describe(result)
        if not result.can_serve:
            raise CommandError(result.verdict if as_json else "cannot serve", returncode=1)

    def _describe(self, r) -> None:
        for line in present.check_lines(r.as_dict()):
            if line.startswith("warning: "):
                self.stdout.write(self.style.WARNING(line))
            else:
                self.stdout.write(line)
