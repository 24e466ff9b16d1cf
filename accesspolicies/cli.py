"""ServeDeck's management commands: who one acts as (`--org` and `--user`, with defaults for one
organisation), and how its errors read (as the `servedeck` client's)."""

import sys

from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, SystemCheckError
from servedeck import present

from accesspolicies.access import require
from accesspolicies.models import Membership, Organization, Role


class ServeDeckCommand(BaseCommand):
    """A command whose errors read as the client's: `error: <message>` on stderr
    (present.error_line; Django would print `CommandError: <message>`), and the error's exit
    status. Called in code (call_command), it raises the CommandError as Django's does."""

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except CommandError as error:
            if (
                not self._called_from_command_line
                or options.get("traceback")
                or isinstance(error, SystemCheckError)
            ):
                raise
            self.stderr.write(present.error_line(str(error)))
            sys.exit(error.returncode)


def add_verb(subparsers, name: str, help: str):
    """A sub-command that takes --org and --user wherever they stand on the line."""
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument("--org", help="organisation slug (default: the only organisation)")
    parser.add_argument("--user", help="username of the member acting (default: its first admin)")
    return parser


def acting_membership(
    org_slug: str | None, username: str | None, action: str = "view", what: str = "applications"
) -> Membership:
    """The member a command acts as, allowed to do `action`; a CommandError names what is wrong."""
    membership = _find_membership(org_slug, username)
    try:
        return require(membership, action, what)
    except PermissionDenied as error:
        raise CommandError(str(error)) from None


def _find_membership(org_slug: str | None, username: str | None) -> Membership:
    organizations = Organization.objects.all()
    if org_slug:
        organization = organizations.filter(slug=org_slug).first()
        if organization is None:
            known = ", ".join(organizations.values_list("slug", flat=True)) or "none"
            raise CommandError(f"--org {org_slug}: no such organisation; known: {known}.")
    else:
        count = organizations.count()
        if count != 1:
            if count == 0:
                raise CommandError("There is no organisation yet: run `manage.py bootstrap` first.")
            known = ", ".join(organizations.values_list("slug", flat=True))
            raise CommandError(f"There are several organisations ({known}): pick one with --org.")
        organization = organizations.get()
    members = Membership.objects.select_related("user", "organization").filter(
        organization=organization
    )
    if username:
        membership = members.filter(user__username=username).first()
        if membership is None:
            raise CommandError(
                f"--user {username}: not a member of {organization.slug}; "
                "name a member, or add them to the organisation first."
            )
        return membership
    membership = members.filter(role=Role.ADMIN).order_by("created_at").first()
    if membership is None:
        raise CommandError(f"{organization.slug} has no admin: name the member acting with --user.")
    return membership
