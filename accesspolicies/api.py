"""REST endpoints for the gateway's callers: API keys (`/api/v1/keys`), access policies
(`/api/v1/policies`) and verified domains (`/api/v1/domains`). Admins only; the views only
translate HTTP to the verbs in accesspolicies.keys, .policies and .domains."""

from datetime import datetime

from ninja import Router, Schema, Status

from accesspolicies import domains as domain_verbs
from accesspolicies import keys as key_verbs
from accesspolicies import policies as policy_verbs
from accesspolicies.models import AccessPolicy, APIKey, VerifiedDomain
from accesspolicies.problems import Invalid
from console.api_errors import errors

ERRORS = errors(400, 409)


# --- API keys ----------------------------------------------------------------------------

keys_router = Router(tags=["api keys"])


class KeyOut(Schema):
    name: str
    prefix: str
    applications: list[str] | None  # None: every application of the organisation
    requestsPerMinute: int | None
    tokensPerMinute: int | None
    concurrentRequests: int | None
    state: str
    createdAt: datetime
    expiresAt: datetime | None
    revokedAt: datetime | None
    lastUsedAt: datetime | None
    previousExpiresAt: datetime | None
    requests24h: int
    tokens24h: int


class KeyCreated(KeyOut):
    key: str  # the secret, shown in this answer only


class KeyIn(Schema):
    name: str
    applications: list[str] | None = None
    requestsPerMinute: int | None = None
    tokensPerMinute: int | None = None
    concurrentRequests: int | None = None
    expiresInDays: int | None = None


class RotateIn(Schema):
    graceMinutes: int = 60


def key_body(key: APIKey, usage: key_verbs.Usage | None = None, secret: str | None = None) -> dict:
    """A key as the API answers it and `apikey list` prints it (the secret only when made)."""
    usage = usage or key_verbs.Usage()
    out = {
        "name": key.name,
        "prefix": key.masked,
        "applications": None if key.all_applications else list(key.applications),
        "requestsPerMinute": key.requests_per_minute,
        "tokensPerMinute": key.tokens_per_minute,
        "concurrentRequests": key.concurrent_requests,
        "state": key_verbs.state(key),
        "createdAt": key.created_at,
        "expiresAt": key.expires_at,
        "revokedAt": key.revoked_at,
        "lastUsedAt": key.last_used_at,
        "previousExpiresAt": key.previous_expires_at,
        "requests24h": usage.requests,
        "tokens24h": usage.tokens,
    }
    if secret is not None:
        out["key"] = secret
    return out


@keys_router.get("", response=list[KeyOut], summary="List API keys, with a day's usage")
def list_keys(request):
    found, usage = key_verbs.listing(request.auth.organization, actor=request.auth)
    return [key_body(k, usage.get(k.pk)) for k in found]


@keys_router.post(
    "", response={201: KeyCreated, **ERRORS}, summary="Create an API key (secret shown once)"
)
def create_key(request, body: KeyIn):
    key, plain = key_verbs.create(
        request.auth.organization,
        body.name,
        body.applications,
        body.requestsPerMinute,
        body.tokensPerMinute,
        body.concurrentRequests,
        body.expiresInDays,
        actor=request.auth,
    )
    return Status(201, key_body(key, secret=plain))


@keys_router.get("/{name}", response=KeyOut, summary="Get an API key")
def get_key(request, name: str):
    key = key_verbs.get_key(request.auth, name)
    usage = key_verbs.usage_by_key([key], key_verbs.timezone.now() - key_verbs.USAGE_WINDOW)
    return key_body(key, usage.get(key.pk))


@keys_router.post("/{name}/revoke", response=KeyOut, summary="Revoke an API key")
def revoke_key(request, name: str):
    key = key_verbs.get_key(request.auth, name)
    key_verbs.revoke(key, actor=request.auth)
    return key_body(key)


ROTATE_BODY = {
    "requestBody": {
        "required": False,
        "description": "Optional; graceMinutes defaults to 60.",
        "content": {"application/json": {"schema": RotateIn.model_json_schema()}},
    }
}


@keys_router.post(
    "/{name}/rotate",
    response={200: KeyCreated, **ERRORS},
    openapi_extra=ROTATE_BODY,
    summary="Give an API key a new secret; the old one works for graceMinutes",
)
def rotate_key(request, name: str):
    key = key_verbs.get_key(request.auth, name)
    grace = 60
    # The body is optional: an empty POST (or a form post) takes the default.
    if request.content_type == "application/json" and request.body.strip():
        try:
            grace = RotateIn.model_validate_json(request.body).graceMinutes
        except ValueError:
            raise Invalid(
                "graceMinutes",
                'send {"graceMinutes": N} (0 to 10080) as JSON, or no body for 60.',
            ) from None
    key, plain = key_verbs.rotate(key, grace, actor=request.auth)
    return key_body(key, secret=plain)


# --- access policies ---------------------------------------------------------------------

policies_router = Router(tags=["access policies"])


class PolicyIn(Schema):
    keys: list[str] | None = None  # None: every key of the organisation
    requestsPerMinute: int | None = None
    tokensPerMinute: int | None = None
    concurrentRequests: int | None = None
    allowedNetworks: list[str] = []


class PolicyCreateIn(PolicyIn):
    name: str


class PolicyOut(Schema):
    name: str
    keys: list[str] | None
    requestsPerMinute: int | None
    tokensPerMinute: int | None
    concurrentRequests: int | None
    allowedNetworks: list[str]
    createdAt: datetime


def _policy(policy: AccessPolicy) -> dict:
    return {
        "name": policy.name,
        "keys": None if policy.all_keys else [k.name for k in policy.keys.all()],
        "requestsPerMinute": policy.requests_per_minute,
        "tokensPerMinute": policy.tokens_per_minute,
        "concurrentRequests": policy.concurrent_requests,
        "allowedNetworks": list(policy.allowed_networks),
        "createdAt": policy.created_at,
    }


def _policy_values(body: PolicyIn) -> dict:
    return {
        "keys": body.keys,
        "rpm": body.requestsPerMinute,
        "tpm": body.tokensPerMinute,
        "concurrency": body.concurrentRequests,
        "allowed_networks": body.allowedNetworks,
    }


@policies_router.get("", response=list[PolicyOut], summary="List access policies")
def list_policies(request):
    found = AccessPolicy.objects.for_member(request.auth, "admin")
    return [_policy(p) for p in found.prefetch_related("keys")]


@policies_router.post("", response={201: PolicyOut, **ERRORS}, summary="Create an access policy")
def create_policy(request, body: PolicyCreateIn):
    policy = policy_verbs.create(
        request.auth.organization, body.name, **_policy_values(body), actor=request.auth
    )
    return Status(201, _policy(policy))


@policies_router.get("/{name}", response=PolicyOut, summary="Get an access policy")
def get_policy(request, name: str):
    return _policy(policy_verbs.get_policy(request.auth, name))


@policies_router.put(
    "/{name}", response={200: PolicyOut, **ERRORS}, summary="Replace an access policy's rules"
)
def update_policy(request, name: str, body: PolicyIn):
    policy = policy_verbs.get_policy(request.auth, name)
    return _policy(policy_verbs.update(policy, **_policy_values(body), actor=request.auth))


@policies_router.delete(
    "/{name}", response={204: None, **ERRORS}, summary="Delete an unused access policy"
)
def delete_policy(request, name: str):
    policy_verbs.delete(policy_verbs.get_policy(request.auth, name), actor=request.auth)
    return Status(204, None)


# --- verified domains --------------------------------------------------------------------

domains_router = Router(tags=["domains"])


class DomainIn(Schema):
    domain: str


class DomainOut(Schema):
    domain: str
    verified: bool
    verifiedAt: datetime | None
    recordName: str
    recordType: str
    recordValue: str
    lastCheckedAt: datetime | None
    lastError: str


def _domain(entry: VerifiedDomain) -> dict:
    return {
        "domain": entry.domain,
        "verified": entry.verified_at is not None,
        "verifiedAt": entry.verified_at,
        "recordName": domain_verbs.record_name(entry.domain),
        "recordType": "TXT",
        "recordValue": domain_verbs.record_value(entry),
        "lastCheckedAt": entry.last_checked_at,
        "lastError": entry.last_error,
    }


@domains_router.get("", response=list[DomainOut], summary="List domains")
def list_domains(request):
    domain_verbs.require(request.auth, "admin", domain_verbs.WHAT)
    return [_domain(d) for d in request.auth.organization.domains.all()]


@domains_router.post(
    "", response={201: DomainOut, **ERRORS}, summary="Add a domain; publish its TXT record"
)
def add_domain(request, body: DomainIn):
    entry = domain_verbs.add(request.auth.organization, body.domain, actor=request.auth)
    return Status(201, _domain(entry))


@domains_router.post(
    "/{domain}/verify", response={200: DomainOut, **ERRORS}, summary="Look up the TXT record"
)
def verify_domain(request, domain: str):
    entry = domain_verbs.get_domain(request.auth, domain)
    domain_verbs.verify(entry, actor=request.auth)
    return _domain(entry)


@domains_router.delete("/{domain}", response={204: None, **ERRORS}, summary="Remove a domain")
def remove_domain(request, domain: str):
    domain_verbs.delete(domain_verbs.get_domain(request.auth, domain), actor=request.auth)
    return Status(204, None)


# --- who calls ---------------------------------------------------------------------------

me_router = Router(tags=["me"])


class MeOut(Schema):
    user: str
    organization: str  # its slug
    organizationName: str
    role: str


@me_router.get("", response=MeOut, summary="Who these credentials act as, where, with what role")
def me(request):
    membership = request.auth
    return {
        "user": membership.user.get_username(),
        "organization": membership.organization.slug,
        "organizationName": membership.organization.name,
        "role": membership.role,
    }
