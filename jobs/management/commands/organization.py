"""`manage.py organization allow-token-variable|token-variables`: the operator, on the console's
host, says which of the host's environment variables an organisation's profiles may name as
`env/<VAR>` Hugging Face token references. No member can; nothing is allowed by default."""

from django.core.management.base import CommandError
from django.db import transaction

from accesspolicies.cli import ServeDeckCommand
from accesspolicies.models import Organization
from jobs.models import Profile
from jobs.token_refs import allowed_variables, variable_problem


class Command(ServeDeckCommand):
    help = "Operator settings of an organisation: the host variables its token references may name."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        allow = sub.add_parser(
            "allow-token-variable",
            help="let the organisation's profiles name env/VAR (--remove takes it back)",
        )
        allow.add_argument("org", help="organisation slug")
        allow.add_argument("variable", help="an environment variable of the console's host")
        allow.add_argument("--remove", action="store_true", help="no longer allow it")
        listing = sub.add_parser("token-variables", help="the variables an organisation may name")
        listing.add_argument("org", help="organisation slug")

    def handle(self, *args, verb, org, **options):
        with transaction.atomic():
            organization = Organization.objects.select_for_update().filter(slug=org).first()
            if organization is None:
                known = ", ".join(Organization.objects.values_list("slug", flat=True)) or "none"
                raise CommandError(f"{org!r}: no such organisation; known: {known}.")
            if verb == "allow-token-variable":
                self.allow(organization, options["variable"], remove=options["remove"])
        names = sorted(allowed_variables(organization.token_variables))
        self.stdout.write(
            f"{organization.slug} may name: {', '.join(f'env/{n}' for n in names) or 'nothing'}"
        )

    def allow(self, organization: Organization, variable: str, *, remove: bool) -> None:
        names = set(allowed_variables(organization.token_variables))
        if remove:
            names.discard(variable)
            users = Profile.objects.filter(
                organization=organization, hf_token_ref=f"env/{variable}"
            ).values_list("name", flat=True)
            if users:
                # They keep the reference, but it is no longer read: say so now.
                self.stderr.write(
                    f"warning: profile(s) {', '.join(users)} name env/{variable}; their model "
                    "servers and Check model get no token until the profile names another."
                )
        else:
            problem = variable_problem(variable)
            if problem:
                raise CommandError(problem)
            names.add(variable)
        organization.token_variables = sorted(names)
        organization.save(update_fields=["token_variables"])
