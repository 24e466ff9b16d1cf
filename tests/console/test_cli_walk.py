"""Every command-line verb, for each persona: the outcome each gets is the one in the table
below, so the command line makes the same access decision as the pages and the REST API
(bug 4: a viewer's `app apply --dry-run` was let through while the API refused it).

Personas, as in test_url_walk.py: ada (admin), dan (deployer), vera (viewer) of acme; otto,
admin of globex, names acme's objects from his own organisation (`--org globex`), so his 404
shows the organisation check. Each run is rolled back, so one persona's delete does not hide
the object from the next. Outcomes: ok (exit 0), 403 (the role may not), 404 (not found in
the member's organisation), refused (any other exit 1: bad input, a backend refusal).
"""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from accesspolicies.models import APIKey, PersonalAccessToken
from jobs.deploy import apply
from jobs.models import Cluster, Profile
from tests.helpers import SHORTEST

NOT_FOUND = re.compile(r"^(--profile: )?No .* (named|for) |has no [\w ]+ named |^You have no ")
PERSONAS = ("admin", "deployer", "viewer", "outsider")

# verb line (M is the manifest file) -> admin deployer viewer outsider
CLI = {
    "app apply -f M --dry-run": "ok ok 403 ok",
    "app apply -f M": "ok ok 403 ok",
    "app render -f M": "ok ok 403 ok",
    "app get bge-embed": "ok ok ok 404",
    "app list": "ok ok ok ok",
    "app history bge-embed": "ok ok ok 404",
    "app rollback bge-embed --to 1": "refused refused 403 404",
    "app deploy bge-embed": "ok ok 403 404",
    # never deployed (syncType Manual): the members who may are told to deploy it first
    "app restart bge-embed": "refused refused 403 404",
    "app stop bge-embed": "refused refused 403 404",
    "app start bge-embed": "refused refused 403 404",
    "app delete bge-embed": "ok ok 403 404",
    "app logs bge-embed": "ok ok 403 404",
    "app benchmark bge-embed": "refused refused 403 404",  # not Running
    "app promote bge-embed": "refused refused 403 404",  # no Canary rollout runs
    "app abort bge-embed": "refused refused 403 404",
    "apikey list": "ok 403 403 ok",
    "apikey create walk-key": "ok 403 403 ok",
    "apikey revoke bge-embed": "ok 403 403 404",
    "apikey rotate bge-embed": "ok 403 403 404",
    "token list": "ok ok ok ok",
    "token create walk-token": "ok ok ok ok",
    "token revoke walk": "ok ok ok ok",
    # the fake Hub has no such model: every member may ask, only acme's see acme's profile
    "checkmodel hf://BAAI/bge-small-en-v1.5 --profile local": "refused refused refused refused",
    "checkmodel hf://BAAI/bge-small-en-v1.5 --profile acme-gpu": "refused refused refused 404",
    "cluster list": "ok 403 403 ok",
    "cluster add walk-local --local": "ok 403 403 ok",
    "cluster discover acme-gpu": "refused 403 403 404",  # a local cluster: nothing to discover
    "profile list": "ok 403 403 ok",
    "profile add walk --cluster local": "ok 403 403 ok",
    "profile edit local --namespace-allowed walk": "ok 403 403 ok",
    "profile discover local": "ok 403 403 ok",
}


def outcome(line: list[str]) -> str:
    try:
        call_command(*line, stdout=StringIO(), stderr=StringIO())
    except CommandError as error:
        text = str(error)
        if "which may not" in text:
            return "403"
        if NOT_FOUND.search(text):
            return "404"
        return "refused"
    except SystemExit:
        return "refused"
    return "ok"


@pytest.fixture
def world(admin, deployer, viewer, outsider, tmp_path):
    manifest = tmp_path / "model.yaml"
    manifest.write_text(
        SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual")
    )
    apply(manifest.read_text(), admin)
    org = admin.organization
    cluster = Cluster.objects.create(organization=org, name="acme-gpu")
    Profile.objects.create(organization=org, name="acme-gpu", cluster=cluster)
    APIKey.objects.create(organization=org, name="bge-embed", lookup="cliwalkkey00")
    members = {"admin": admin, "deployer": deployer, "viewer": viewer, "outsider": outsider}
    for member in members.values():
        PersonalAccessToken.issue(member.user, member.organization, "walk")
    return members, str(manifest)


@pytest.mark.parametrize("verb", list(CLI))
def test_cli_verb(world, verb):
    members, manifest = world
    seen = []
    for persona in PERSONAS:
        member = members[persona]
        words = [manifest if word == "M" else word for word in verb.split()]
        line = [*words, "--org", member.organization.slug, "--user", member.user.username]
        with transaction.atomic():
            seen.append(outcome(line))
            transaction.set_rollback(True)
    got = " ".join(seen)
    assert got == CLI[verb], f"{verb}: {PERSONAS} got {got}"


def test_every_verb_is_walked():
    """Whoever adds a verb to a command says here who may use it."""
    from django.core.management import load_command_class

    walked = {tuple(line.split()[:2]) for line in CLI}
    for command in ("app", "apikey", "token", "cluster", "profile"):
        parser = load_command_class(
            {"app": "jobs", "cluster": "jobs", "profile": "jobs"}.get(command, "accesspolicies"),
            command,
        ).create_parser("manage.py", command)
        verbs = next(a for a in parser._actions if a.dest == "verb").choices
        missing = sorted(v for v in verbs if (command, v) not in walked)
        assert not missing, f"{command}: verbs without an entry in CLI: {missing}"
