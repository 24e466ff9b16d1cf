"""Who a management command acts as: `--org` and `--user`, with defaults for one organisation."""

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError

from accesspolicies.access import require
from accesspolicies.models import Membership, Organization, Role


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


def table_lines(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned columns, the first row being the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "never"
