"""Who a management command acts as: `--org` and `--user`, defaulting sensibly on one organisation."""

from django.core.management.base import CommandError

from accesspolicies.models import Membership, Organization, Role


def add_actor_arguments(parser) -> None:
    parser.add_argument("--org", help="organisation slug (default: the only organisation)")
    parser.add_argument("--user", help="username of the member acting (default: its first admin)")


def acting_membership(org_slug: str | None, username: str | None) -> Membership:
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
