"""First run: the first organisation, its admin and a `local` profile whose machine catalog is
this machine as it is (its GPUs, cores and memory). Safe to run again: each run also corrects
local profiles that still carry the default cluster catalog (made before discovery)."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from accesspolicies.cli import ServeDeckCommand
from accesspolicies.models import Membership, Organization, Role
from accesspolicies.validators import password_problems, validate_username
from jobs.backends.local.machine_check import discovered_catalog
from jobs.machine_catalog import is_default_catalog
from jobs.models import Cluster, Profile


class Command(ServeDeckCommand):
    help = (
        "Create the first organisation, an admin and a `local` profile, once. The admin's "
        "password comes from SERVEDECK_ADMIN_PASSWORD, or is generated and printed once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--org", default=os.environ.get("SERVEDECK_ORG", "default"))
        parser.add_argument("--admin", default=os.environ.get("SERVEDECK_ADMIN_USER", "admin"))

    @transaction.atomic
    def handle(self, *args, org, admin, **options):
        organization, org_created = Organization.objects.get_or_create(
            slug=org, defaults={"name": org.replace("-", " ").title()}
        )
        User = get_user_model()
        user = User.objects.filter(username=admin).first()
        password = None
        if user is None:
            try:
                validate_username(admin)
            except ValidationError as error:
                raise CommandError(f"--admin (SERVEDECK_ADMIN_USER): {error.messages[0]}") from None
            password = os.environ.get("SERVEDECK_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            problems = password_problems(password, User(username=admin))
            if problems:
                raise CommandError(
                    "SERVEDECK_ADMIN_PASSWORD is refused: "
                    + " ".join(problems)
                    + " Choose a stronger one, or leave it unset for a generated one."
                )
            user = User.objects.create_user(username=admin, password=password)
        Membership.objects.get_or_create(
            organization=organization, user=user, defaults={"role": Role.ADMIN}
        )
        cluster, _ = Cluster.objects.get_or_create(
            organization=organization, name="local", defaults={"backend": Cluster.Backend.LOCAL}
        )
        here, read = discovered_catalog()
        Profile.objects.get_or_create(
            organization=organization,
            name="local",
            defaults={"cluster": cluster, "namespace": "default", "machine_catalog": here},
        )
        # The machine belongs to every organisation's local profiles: a catalog still the
        # default one (t4 to b200, a cluster's) was never this machine's.
        corrected = []
        for profile in Profile.objects.filter(
            cluster__backend=Cluster.Backend.LOCAL
        ).select_related("organization"):
            if is_default_catalog(profile.machine_catalog):
                profile.machine_catalog = here
                profile.save(update_fields=["machine_catalog"])
                corrected.append(f"{profile.organization.slug}/{profile.name}")
        if corrected:
            self.stdout.write(
                f"Machine catalog of {', '.join(corrected)} set to this machine ({read})."
            )
        if org_created:
            self.stdout.write(f"Created organisation {organization.slug} with a local profile.")
        if password is None:
            self.stdout.write(f"Admin {admin} exists already; its password is unchanged.")
        elif os.environ.get("SERVEDECK_ADMIN_PASSWORD"):
            self.stdout.write(
                f"Created admin {admin} with the password in SERVEDECK_ADMIN_PASSWORD."
            )
        else:
            self.stdout.write(
                self.style.WARNING(f"Created admin {admin} with password {password} (shown once).")
            )
