"""`manage.py apikey …`: create, list, revoke and rotate the gateway's API keys (admins only).

The same verbs as the Access pages and `/api/v1/keys`; the secret is printed once."""

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError
from django.http import Http404
from servedeck import present

from accesspolicies import audit
from accesspolicies import keys as key_verbs
from accesspolicies.api import key_body
from accesspolicies.cli import ServeDeckCommand, acting_membership, add_verb
from accesspolicies.problems import Invalid
from console.api import as_answered


class Command(ServeDeckCommand):
    help = "Manage API keys for the gateway (/v1): create, list, revoke, rotate."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        create = add_verb(verbs, "create", help="a new key; its secret is printed once")
        create.add_argument("name", help="who calls with it, e.g. support-bot")
        create.add_argument(
            "--app",
            action="append",
            dest="apps",
            metavar="APP",
            help="an application it may call (repeat; default: every application)",
        )
        create.add_argument("--rpm", help="requests per minute (default: no limit)")
        create.add_argument("--tpm", help="tokens per minute (default: no limit)")
        create.add_argument("--concurrency", help="concurrent requests (default: no limit)")
        create.add_argument("--expires-in", metavar="DAYS", help="days until it expires")
        create.add_argument(
            "--json", action="store_true", dest="as_json", help="print a JSON object"
        )
        listing = add_verb(verbs, "list", help="the organisation's keys")
        listing.add_argument(
            "--json", action="store_true", dest="as_json", help="print a JSON list"
        )
        add_verb(verbs, "revoke", help="refuse a key from now").add_argument("name")
        rotate = add_verb(verbs, "rotate", help="a new secret; the old one works for a while")
        rotate.add_argument("name")
        rotate.add_argument(
            "--grace", default="60", metavar="MINUTES", help="minutes the old secret keeps working"
        )
        rotate.add_argument(
            "--json", action="store_true", dest="as_json", help="print a JSON object"
        )

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user, "admin", key_verbs.WHAT)
        try:
            with audit.cli_origin():
                getattr(self, f"do_{verb}")(membership, **options)
        except Invalid as error:
            flag = present.key_flag(error.field)
            raise CommandError(f"{flag}: {error.message}", returncode=1) from None
        except (Http404, PermissionDenied) as error:
            raise CommandError(str(error), returncode=1) from None

    def _json(self, body) -> None:
        """The API's answer, printed as the client prints it."""
        self.stdout.write(present.dump(as_answered(body), "json"))

    def _secret(self, key, plain: str, as_json: bool, said: str) -> None:
        if as_json:
            self._json(key_body(key, secret=plain))
            return
        self.stdout.write(said)
        self.stdout.write(plain)
        self.stderr.write(present.SECRET_ONCE)

    def do_create(self, membership, name, apps, rpm, tpm, concurrency, expires_in, as_json, **_):
        key, plain = key_verbs.create(
            membership.organization,
            name,
            apps,
            rpm,
            tpm,
            concurrency,
            expires_in,
            actor=membership,
        )
        self._secret(key, plain, as_json, present.key_created_line(key.name))

    def do_list(self, membership, as_json, **_):
        found, usage = key_verbs.listing(membership.organization, actor=membership)
        if as_json:
            self._json([key_body(k, usage.get(k.pk)) for k in found])
            return
        rows = present.key_rows(key_body(k, usage.get(k.pk)) for k in found)
        for line in present.table_lines(rows):
            self.stdout.write(line)

    def do_revoke(self, membership, name, **_):
        key = key_verbs.get_key(membership, name)
        revoked = key_verbs.revoke(key, actor=membership)
        self.stdout.write(present.key_revoked_line(name, already=not revoked))

    def do_rotate(self, membership, name, grace, as_json, **_):
        key, plain = key_verbs.rotate(key_verbs.get_key(membership, name), grace, actor=membership)
        self._secret(
            key,
            plain,
            as_json,
            present.key_rotated_line(name, key.previous_expires_at),
        )
