"""Every URL pattern and every API route, for anonymous, each role and an outsider: the status
each gets is the one in the table below. A route without an entry fails, so that whoever adds a
route says who may use it.

Personas: anonymous; ada (admin), dan (deployer), vera (viewer) of acme; otto, admin of globex
(an outsider to acme's objects). Path parameters name acme's objects only, so an outsider's
404 shows the organisation check; the draft and the token are dan's (drafts and tokens belong
to their author). Each persona's request runs in a savepoint rolled back after it, so a
deployer's Delete does not hide the object from the admin's. Requests carry no body: writes
refused for a role answer 403/404 before reading it, and allowed ones answer the form's or the
API's own refusal.
"""

import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from accesspolicies.models import (
    AccessPolicy,
    APIKey,
    Invitation,
    PersonalAccessToken,
    VerifiedDomain,
)
from console.api import api
from jobs.deploy import apply
from jobs.models import Application, Benchmark, Cluster, Draft, Profile
from models_catalog.models import ModelMaster
from tests.helpers import SHORTEST, client_for

PERSONAS = ("anonymous", "admin", "deployer", "viewer", "outsider")
LOGIN = "login"  # a redirect to the login page

# Path parameters, by the route's first segment and the parameter's name.
PARAMETERS = {
    ("models", "name"): "bge-embed",
    ("clusters", "name"): "acme-gpu",
    ("profiles", "name"): "acme-gpu",
    ("deploy", "key"): "DRAFT",
    ("access", "username"): "vera",
    ("access", "lookup"): "TOKEN",  # dan's token, and an invitation with the same lookup
    ("access", "name"): "bge-embed",  # an API key and an access policy
    ("access", "domain"): "walk.example.com",
    ("access", "token"): "INVITATION",
    ("catalog", "slug"): "MASTER",
    ("password", "uidb64"): "MQ",
    ("password", "token"): "not-a-token",
    ("api", "name"): "bge-embed",  # the application, the API key and the access policy
    ("api", "domain"): "walk.example.com",
    ("api", "benchmark_id"): "BENCHMARK",  # a finished benchmark of bge-embed
}

# route (as Django spells it) -> method -> what anonymous, admin, deployer, viewer and outsider
# get, in that order: a status, or `login` for a redirect to the login page. Writes a role may
# not do answer 403; acme's objects answer 404 to the outsider (and drafts and tokens to anyone
# but their author). Read-only pages that also answer POST only render (no state changes).
PAGES = {
    # logging in, out, and passwords: not scoped to an organisation
    "login/": {"GET": "200 302 302 302 302", "POST": "200 302 302 302 302"},
    "logout/": {"GET": "login 405 405 405 405", "POST": "login login login login login"},
    "password/change/": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "password/change/done/": {"GET": "login 200 200 200 200", "POST": "login 405 405 405 405"},
    "password/set/<uidb64>/<token>/": {"GET": "200 200 200 200 200", "POST": "200 200 200 200 200"},
    "favicon.ico": {"GET": "301 301 301 301 301", "POST": "405 405 405 405 405"},
    "organization/switch/": {"GET": "login 405 405 405 405", "POST": "login 404 404 404 404"},
    # the API's own pages (its operations are in API below)
    "api/v1/": {"GET": "404 404 404 404 404", "POST": "404 404 404 404 404"},
    "api/v1/openapi.json": {"GET": "200 200 200 200 200", "POST": "200 200 200 200 200"},
    "api/v1/docs": {"GET": "200 200 200 200 200", "POST": "200 200 200 200 200"},
    # models
    "": {"GET": "login 200 200 200 200", "POST": "login 405 405 405 405"},
    "models/<slug:name>/": {"GET": "login 200 200 200 404", "POST": "login 200 200 200 404"},
    "models/<slug:name>/health/": {"GET": "login 200 200 200 404", "POST": "login 405 405 405 405"},
    "models/<slug:name>/rollback/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 302 403 404",
    },
    "models/<slug:name>/deploy/": {"GET": "login 405 405 405 405", "POST": "login 302 302 403 404"},
    # delete without the model's name typed (confirm_name): 400, nothing deleted
    "models/<slug:name>/delete/": {"GET": "login 405 405 405 405", "POST": "login 400 400 403 404"},
    "models/<slug:name>/restart/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 302 403 404",
    },
    "models/<slug:name>/stop/": {"GET": "login 405 405 405 405", "POST": "login 302 302 403 404"},
    # Benchmark (not Running: the page says why, 302 back to it)
    "models/<slug:name>/benchmark/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 302 403 404",
    },
    "models/<slug:name>/start/": {"GET": "login 405 405 405 405", "POST": "login 302 302 403 404"},
    # Promote and Abort rollout (no rollout runs: the page says so, 302 back to it)
    "models/<slug:name>/promote/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 302 403 404",
    },
    "models/<slug:name>/abort/": {"GET": "login 405 405 405 405", "POST": "login 302 302 403 404"},
    "models/<slug:name>/edit/": {"GET": "login 200 200 403 404", "POST": "login 302 302 403 404"},
    # the overview's chart data (JSON), a replica's log, the diff of two revisions (no
    # revisions named: 400 saying which to name)
    "models/<slug:name>/charts/": {"GET": "login 200 200 200 404", "POST": "login 405 405 405 405"},
    "models/<slug:name>/logs/": {"GET": "login 200 200 403 404", "POST": "login 405 405 405 405"},
    "models/<slug:name>/diff/": {"GET": "login 400 400 400 404", "POST": "login 405 405 405 405"},
    # deploy model: from YAML, and the wizard (its drafts are their author's: dan's)
    "deploy/yaml/": {"GET": "login 200 200 403 200", "POST": "login 200 200 403 200"},
    "deploy/yaml/dry-run/": {"GET": "login 405 405 405 405", "POST": "login 400 400 403 400"},
    "deploy/yaml/apply/": {"GET": "login 405 405 405 405", "POST": "login 400 400 403 400"},
    "deploy/": {"GET": "login 200 200 403 200", "POST": "login 400 400 403 400"},
    "deploy/first/<slug:key>/": {
        "GET": "login 405 405 405 405",
        "POST": "login 404 404 403 404",
    },
    "deploy/name/": {"GET": "login 200 200 403 200", "POST": "login 405 405 405 405"},
    "deploy/hub/": {"GET": "login 200 200 403 200", "POST": "login 405 405 405 405"},
    "deploy/hub/pick/": {"GET": "login 200 200 403 200", "POST": "login 405 405 405 405"},
    "deploy/drafts/discard/": {"GET": "login 405 405 405 405", "POST": "login 302 302 403 302"},
    "deploy/drafts/<slug:key>/": {"GET": "login 404 302 403 404", "POST": "login 405 405 405 405"},
    "deploy/drafts/<slug:key>/discard/": {
        "GET": "login 405 405 405 405",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/model/": {
        "GET": "login 404 200 403 404",
        "POST": "login 404 400 403 404",
    },
    "deploy/drafts/<slug:key>/check/": {
        "GET": "login 404 302 403 404",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/compute/": {
        "GET": "login 404 302 403 404",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/compute/memory/": {
        "GET": "login 404 200 403 404",
        "POST": "login 405 405 405 405",
    },
    "deploy/drafts/<slug:key>/access/": {
        "GET": "login 404 302 403 404",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/api/": {
        "GET": "login 404 302 403 404",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/review/": {
        "GET": "login 404 302 403 404",
        "POST": "login 404 302 403 404",
    },
    "deploy/drafts/<slug:key>/manifest.yaml": {
        "GET": "login 404 200 403 404",
        "POST": "login 405 405 405 405",
    },
    "deploy/drafts/<slug:key>/deploy/": {
        "GET": "login 405 405 405 405",
        "POST": "login 404 302 403 404",
    },
    # clusters and profiles: admins only
    "clusters/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "clusters/add/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "clusters/<slug:name>/": {"GET": "login 200 403 403 404", "POST": "login 200 403 403 404"},
    "clusters/<slug:name>/discover/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "profiles/add/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "profiles/<slug:name>/": {"GET": "login 200 403 403 404", "POST": "login 200 403 403 404"},
    "profiles/<slug:name>/discover/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    # access: members (admins change them), and each member's own tokens (dan's)
    "access/members/": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "access/tokens/": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "access/tokens/create/": {"GET": "login 405 405 405 405", "POST": "login 400 400 400 400"},
    "access/tokens/<str:lookup>/revoke/": {
        "GET": "login 405 405 405 405",
        "POST": "login 404 302 404 404",
    },
    # the catalog: Check model, model masters (deployers change them)
    "catalog/check/": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "catalog/masters/": {"GET": "login 200 200 200 200", "POST": "login 200 200 200 200"},
    "catalog/masters/add/": {"GET": "login 200 200 403 200", "POST": "login 200 200 403 200"},
    "catalog/masters/recommended/": {
        "GET": "login 405 405 405 405",
        "POST": "login 404 404 403 404",
    },
    "catalog/masters/recipe/": {"GET": "login 200 200 403 200", "POST": "login 200 200 403 200"},
    "catalog/masters/<str:slug>/": {
        "GET": "login 200 200 403 404",
        "POST": "login 200 200 403 404",
    },
    "catalog/masters/<str:slug>/delete/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 302 403 404",
    },
    # API keys, access policies, verified domains, invitations and the audit log: admins only
    "access/audit/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "access/domains/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "access/domains/<str:domain>/remove/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/domains/<str:domain>/verify/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/domains/add/": {"GET": "login 405 405 405 405", "POST": "login 400 403 403 400"},
    "access/invitations/<str:lookup>/withdraw/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/join/<str:token>/": {"GET": "410 410 410 410 410", "POST": "410 410 410 410 410"},
    "access/keys/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "access/keys/<str:name>/revoke/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/keys/<str:name>/rotate/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/keys/create/": {"GET": "login 405 405 405 405", "POST": "login 400 403 403 400"},
    "access/members/<path:username>/password-link/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/members/<path:username>/remove/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/members/<path:username>/role/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/members/invite/": {"GET": "login 405 405 405 405", "POST": "login 400 403 403 400"},
    "access/policies/": {"GET": "login 200 403 403 200", "POST": "login 200 403 403 200"},
    "access/policies/<str:name>/": {
        "GET": "login 200 403 403 404",
        "POST": "login 302 403 403 404",
    },
    "access/policies/<str:name>/delete/": {
        "GET": "login 405 405 405 405",
        "POST": "login 302 403 403 404",
    },
    "access/policies/create/": {"GET": "login 405 405 405 405", "POST": "login 400 403 403 400"},
}
# API path (as OpenAPI spells it) -> method -> the same, with a personal access token each.
# Bodies are empty: allowed writes answer the API's refusal of the body (400/422).
API = {
    "/api/v1/applications": {"GET": "401 200 200 200 200", "POST": "401 400 400 403 400"},
    "/api/v1/applications/{name}": {
        "GET": "401 200 200 200 404",
        "PUT": "401 400 400 403 404",
        "DELETE": "401 204 204 403 404",
    },
    "/api/v1/applications/{name}/history": {"GET": "401 200 200 200 404"},
    # the body is read before the role: an empty one is refused first
    "/api/v1/applications/{name}/rollback": {"POST": "401 400 400 400 400"},
    "/api/v1/applications/{name}/restart": {"POST": "401 400 400 403 404"},
    "/api/v1/applications/{name}/stop": {"POST": "401 400 400 403 404"},
    "/api/v1/applications/{name}/start": {"POST": "401 400 400 403 404"},
    "/api/v1/applications/{name}/deploy": {"POST": "401 200 200 403 404"},
    # a benchmark: 409 while it is not Running; its runs are every member's to read
    "/api/v1/applications/{name}/benchmarks": {
        "GET": "401 200 200 200 404",
        "POST": "401 409 409 403 404",
    },
    "/api/v1/applications/{name}/benchmarks/{benchmark_id}": {"GET": "401 200 200 200 404"},
    # a Canary rollout: none runs, so there is none to read (404) or decide (409)
    "/api/v1/applications/{name}/rollout": {"GET": "401 404 404 404 404"},
    "/api/v1/applications/{name}/promote": {"POST": "401 409 409 403 404"},
    "/api/v1/applications/{name}/abort": {"POST": "401 409 409 403 404"},
    # the terminal client's: render a manifest (a dry run), a replica's log, who calls
    "/api/v1/applications/render": {"POST": "401 400 400 403 400"},
    "/api/v1/applications/{name}/logs": {"GET": "401 200 200 403 404"},
    "/api/v1/me": {"GET": "401 200 200 200 200"},
    "/api/v1/models/search": {"GET": "401 422 422 422 422"},
    "/api/v1/models/check": {"GET": "401 422 422 422 422"},
    # the gateway's callers (admins only, a key's usage too) and usage (every member)
    "/api/v1/applications/{name}/usage": {"GET": "401 200 200 200 404"},
    "/api/v1/applications/{name}/charts": {"GET": "401 200 200 200 404"},
    "/api/v1/applications/{name}/health": {"GET": "401 200 200 200 404"},
    "/api/v1/domains": {"GET": "401 200 403 403 200", "POST": "401 400 400 400 400"},
    "/api/v1/domains/{domain}": {"DELETE": "401 204 403 403 404"},
    "/api/v1/domains/{domain}/verify": {"POST": "401 200 403 403 404"},
    "/api/v1/keys": {"GET": "401 200 403 403 200", "POST": "401 400 400 400 400"},
    "/api/v1/keys/{name}": {"GET": "401 200 403 403 404"},
    "/api/v1/keys/{name}/revoke": {"POST": "401 200 403 403 404"},
    "/api/v1/keys/{name}/rotate": {"POST": "401 200 403 403 404"},
    "/api/v1/keys/{name}/usage": {"GET": "401 200 403 403 404"},
    "/api/v1/policies": {"GET": "401 200 403 403 200", "POST": "401 400 400 400 400"},
    "/api/v1/policies/{name}": {
        "DELETE": "401 204 403 403 404",
        "GET": "401 200 403 403 404",
        "PUT": "401 422 422 422 422",
    },
}


def page_routes(patterns=None, prefix=""):
    """Every URL pattern but the API's operations (walked from its OpenAPI paths instead)."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from page_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            if getattr(pattern.callback, "__module__", "") == "ninja.operation":
                continue
            yield route


def api_routes():
    for path, operations in api.get_openapi_schema()["paths"].items():
        for method in operations:
            yield path, method.upper()


@pytest.fixture
def world(admin, deployer, viewer, outsider):
    """acme's objects the path parameters name, and a client per persona."""
    apply(SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual"), admin)
    cluster = Cluster.objects.create(organization=admin.organization, name="acme-gpu")
    Profile.objects.create(organization=admin.organization, name="acme-gpu", cluster=cluster)
    draft = Draft.objects.create(
        organization=deployer.organization, author=deployer.user, manifest={}
    )
    master = ModelMaster.objects.create(organization=admin.organization, model_id="acme/tiny")
    token, _ = PersonalAccessToken.issue(deployer.user, deployer.organization, "walk")
    org = admin.organization
    key = APIKey.objects.create(organization=org, name="bge-embed", lookup="walkkey00000")
    AccessPolicy.objects.create(organization=org, name="bge-embed").keys.add(key)
    VerifiedDomain.objects.create(organization=org, domain="walk.example.com")
    Invitation.objects.create(
        organization=org,
        lookup=token.lookup,
        secret_hash="0" * 64,
        expires_at=timezone.now() + timedelta(days=1),
    )
    members = {"admin": admin, "deployer": deployer, "viewer": viewer, "outsider": outsider}
    bearers = {}
    for persona, member in members.items():
        _, plain = PersonalAccessToken.issue(member.user, member.organization, "walk")
        bearers[persona] = {"Authorization": f"Bearer {plain}"}

    # A fresh client for each request: a Log out must not log the next request out.
    def page_client(persona):
        return Client() if persona == "anonymous" else client_for(members[persona])

    def api_client(persona):
        return Client(headers=bearers.get(persona, {}))

    application = Application.objects.get(organization=org, name="bge-embed")
    benchmark = Benchmark.objects.create(
        application=application,
        revision=application.revisions.get(),
        task="embedding",
        route="/v1/embeddings",
        state=Benchmark.State.SUCCEEDED,
        deadline=timezone.now(),
    )
    values = {
        "BENCHMARK": str(benchmark.pk),
        "DRAFT": draft.key,
        "TOKEN": token.lookup,
        "MASTER": master.slug,
        "INVITATION": f"sdi_{token.lookup}not-the-secret",
    }
    return page_client, api_client, values


ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>|\{(\w+)\}")


def fill(route: str, values: dict) -> str:
    """The URL of `route` with each <converter:name> or {name} filled from PARAMETERS."""
    first = "api" if route.startswith("/api/") else route.split("/")[0]

    def one(match: re.Match) -> str:
        key = (first, match.group(1) or match.group(2))
        assert key in PARAMETERS, f"{route}: add {key} to PARAMETERS with an object of acme's"
        return values.get(PARAMETERS[key], PARAMETERS[key])

    url = ROUTE_PARAMETER.sub(one, route)
    return url if url.startswith("/") else "/" + url


def outcome(response) -> str:
    if response.status_code == 302 and response["Location"].startswith("/login/"):
        return LOGIN
    return str(response.status_code)


def statuses(client_for_persona, url: str, method: str) -> list[str]:
    seen = []
    for persona in PERSONAS:
        with transaction.atomic():
            response = getattr(client_for_persona(persona), method.lower())(url)
            transaction.set_rollback(True)
        seen.append(outcome(response))
    return seen


PAGE_CASES = [(route, method) for route in PAGES for method in PAGES[route]]
API_CASES = [(path, method) for path in API for method in API[path]]
HOW_TO_ADD = (
    "add it to {table} in tests/console/test_url_walk.py with the status each persona "
    "(anonymous admin deployer viewer outsider) should get; test_page and test_api name what "
    "they get today when it differs"
)


def test_every_page_route_is_in_the_table():
    routes = set(page_routes())
    missing = sorted(routes - set(PAGES))
    assert not missing, f"routes without an entry: {missing}: " + HOW_TO_ADD.format(table="PAGES")
    gone = sorted(set(PAGES) - routes)
    assert not gone, f"entries for routes that no longer exist: {gone}; remove them"


def test_every_api_route_is_in_the_table():
    routes = set(api_routes())
    listed = set(API_CASES)
    missing = sorted(routes - listed)
    assert not missing, f"API routes without an entry: {missing}: " + HOW_TO_ADD.format(table="API")
    gone = sorted(listed - routes)
    assert not gone, f"entries for API routes that no longer exist: {gone}; remove them"


def test_the_table_keeps_the_rules():
    """Whatever a new entry says, some answers are never right."""
    for route, methods in PAGES.items():
        for method, line in methods.items():
            anonymous, *members = line.split()
            # an invitation link is for people without an account too; the favicon is asked
            # for by the login page itself
            open_routes = ("login/", "password/set/", "api/", "access/join/", "favicon.ico")
            if not route.startswith(open_routes):
                assert anonymous == LOGIN, f"{method} {route}: anonymous must be sent to log in"
            assert "500" not in line
    for path, methods in API.items():
        for method, line in methods.items():
            assert line.split()[0] == "401", f"{method} {path}: anonymous must get 401"
            if "{name}" in path:
                # 400/422: an empty body is refused before the object is looked up
                assert line.split()[-1] in ("404", "400", "422"), (
                    f"{method} {path}: outsider sees it"
                )


@pytest.mark.parametrize("route, method", PAGE_CASES)
def test_page(world, route, method):
    page_client, _, values = world
    got = " ".join(statuses(page_client, fill(route, values), method))
    assert got == PAGES[route][method], f"{method} /{route}: {PERSONAS} got {got}"


@pytest.mark.parametrize("path, method", API_CASES)
def test_api(world, path, method):
    _, api_client, values = world
    got = " ".join(statuses(api_client, fill(path, values), method))
    assert got == API[path][method], f"{method} {path}: {PERSONAS} got {got}"


def url_patterns(patterns=None, prefix=""):
    """Every URL pattern the console serves, the API's operations included, with its view."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from url_patterns(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route, pattern.callback


def test_discover():
    """The walk discovers every URL pattern the console serves: each is a page route (walked
    from the URLconf, in PAGES) or an operation of the REST API (walked from its OpenAPI
    document, in API), so no route falls between the two walks and goes unchecked (a second
    API mounted beside console.api would)."""
    pages = set(page_routes())
    api_paths = {path for path, _ in api_routes()}
    outside = []
    served_paths = set()
    for route, view in url_patterns():
        if route in pages:
            assert route in PAGES, f"/{route}: " + HOW_TO_ADD.format(table="PAGES")
            continue
        assert getattr(view, "__module__", "") == "ninja.operation", f"/{route} walked by neither"
        path = "/" + ROUTE_PARAMETER.sub(lambda m: "{" + (m.group(1) or m.group(2)) + "}", route)
        served_paths.add(path)
        if path not in api_paths:
            outside.append(path)
    assert not outside, f"API routes not in console.api's OpenAPI document: {sorted(outside)}"
    assert served_paths == api_paths == set(API), "the API's operations, served and listed"
