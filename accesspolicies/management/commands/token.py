"""`manage.py token …`: personal access tokens for the REST API, so scripts and CI reach it
without the pages. A token acts as its member (`--user`), with their role; printed once."""

import json
from datetime import timedelta

from django.core.management.base import CommandError
from django.utils import timezone
from servedeck.present import table_lines, when

from accesspolicies import audit, limits
from accesspolicies.cli import ServeDeckCommand, acting_membership, add_verb
from accesspolicies.models import PersonalAccessToken
from accesspolicies.problems import Invalid, show

MAX_DAYS = 366  # as on the Access page
NAME_MAX = 100


class Command(ServeDeckCommand):
    help = "Manage personal access tokens for the REST API: create, list, revoke."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        create = add_verb(verbs, "create", help="a new token for --user; printed once")
        create.add_argument("name", help="what it is for, e.g. ci-deploys")
        create.add_argument("--expires-in", metavar="DAYS", help="days until it expires")
        create.add_argument("--json", action="store_true", dest="as_json", help="print JSON")
        listing = add_verb(verbs, "list", help="the tokens of --user in the organisation")
        listing.add_argument("--json", action="store_true", dest="as_json", help="print JSON")
        add_verb(verbs, "revoke", help="refuse the token from now").add_argument("name")

    def handle(self, *args, verb, org, user, **options):
        membership = acting_membership(org, user, "view", "tokens")
        try:
            with audit.cli_origin():
                getattr(self, f"do_{verb}")(membership, **options)
        except Invalid as error:
            raise CommandError(f"{error.field}: {error.message}", returncode=1) from None

    def _own(self, membership):
        return PersonalAccessToken.objects.for_member(membership)

    def do_create(self, membership, name, expires_in, as_json, **_):
        text = name.strip()
        if not text or len(text) > NAME_MAX:
            raise Invalid("NAME", f"{show(name)}: accepts 1 to {NAME_MAX} characters.")
        days = limits.bounded_int("--expires-in", expires_in, 1, MAX_DAYS, "days")
        expires = timezone.now() + timedelta(days=days) if days else None
        token, plain = PersonalAccessToken.issue(
            membership.user, membership.organization, text, expires
        )
        audit.record(membership.organization, membership.user, "token.create", "token", text)
        if as_json:
            self.stdout.write(json.dumps({**_described(token), "token": plain}, default=str))
            return
        self.stdout.write(f"token/{text} created for {membership.user}; its token:")
        self.stdout.write(plain)
        self.stderr.write("Copy it now: it is shown once; ServeDeck keeps only a hash of it.")

    def do_list(self, membership, as_json, **_):
        tokens = list(self._own(membership))
        if as_json:
            self.stdout.write(json.dumps([_described(t) for t in tokens], default=str))
            return
        rows = [("NAME", "TOKEN", "STATE", "EXPIRES", "LAST USED")]
        for t in tokens:
            rows.append((t.name, t.masked, _state(t), when(t.expires_at), when(t.last_used_at)))
        for line in table_lines(rows):
            self.stdout.write(line)

    def do_revoke(self, membership, name, **_):
        live = [t for t in self._own(membership).filter(name=name) if t.is_live()]
        if not live:
            raise CommandError(
                f"{membership.user} has no live token named {show(name)} in "
                f"{membership.organization}; `token list` shows them.",
                returncode=1,
            )
        for token in live:
            token.revoke()
            audit.record(membership.organization, membership.user, "token.revoke", "token", name)
        self.stdout.write(f"token/{name} revoked")


def _state(token) -> str:
    if token.revoked_at:
        return "revoked"
    return "active" if token.is_live() else "expired"


def _described(token) -> dict:
    return {
        "name": token.name,
        "prefix": token.masked,
        "state": _state(token),
        "createdAt": token.created_at,
        "expiresAt": token.expires_at,
        "lastUsedAt": token.last_used_at,
    }
