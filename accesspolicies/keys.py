"""API keys for the gateway (`/v1`): create, revoke, rotate and list, the same for the pages,
the REST API and the command line. Only admins manage keys; the secret is returned once and
only its hash is stored; every change is in the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.http import Http404
from django.utils import timezone

from accesspolicies import audit, limits
from accesspolicies.access import require
from accesspolicies.models import APIKey, Membership, Organization
from accesspolicies.problems import Invalid, searchable, show
from accesspolicies.secrets import API_KEY

WHAT = "API keys"
USAGE_WINDOW = timedelta(hours=24)


def _admin(org: Organization, actor: Membership) -> Membership:
    require(actor, "admin", WHAT)
    if actor.organization_id != org.pk:
        raise Http404("No such organisation.")
    return actor


def get_key(actor: Membership, name: str) -> APIKey:
    """The organisation's key `name`, for an admin; 404 when the organisation has none (the
    manager refuses another role before it looks: an admin's business even to learn whether
    it exists)."""
    return APIKey.objects.object_for_member(actor, name, "admin")


def model_ids(rows) -> list[str]:
    """The model ids clients may call, from (application name, manifest) rows: each name, then
    its LoRA adapters' (spec.source.model.adapters[].name, which jobs' manifest rules keep
    unique DNS labels)."""
    found: list[str] = []
    for name, manifest in rows:
        found.append(name)
        spec = manifest.get("spec") if isinstance(manifest, dict) else None
        source = spec.get("source") if isinstance(spec, dict) else None
        model = source.get("model") if isinstance(source, dict) else None
        adapters = model.get("adapters") if isinstance(model, dict) else None
        for item in adapters if isinstance(adapters, list) else ():
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                found.append(item["name"])
    return found


def application_names(org: Organization, value: object) -> list[str] | None:
    """None (every application) or the named applications, each one of the organisation's
    (read through the relation jobs adds to the organisation: this app does not import jobs)."""
    if value is None or value == [] or value == "":
        return None
    if isinstance(value, str):
        value = [part for part in value.replace(",", " ").split() if part]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise Invalid("applications", "must be a list of application names, or empty for all.")
    if len(value) > limits.MAX_APPLICATIONS:
        raise Invalid(
            "applications",
            f"{len(value)} names; accepts at most {limits.MAX_APPLICATIONS}. Leave it empty to "
            "allow every application.",
        )
    names = list(dict.fromkeys(v.strip() for v in value if v.strip()))
    known = set(
        org.applications.filter(name__in=[n for n in names if searchable(n, 63)]).values_list(
            "name", flat=True
        )
    )
    missing = [n for n in names if n not in known]
    if missing:  # a LoRA adapter is a model of its own, which a key may be limited to
        known |= set(model_ids(org.applications.values_list("name", "manifest")))
        missing = [n for n in names if n not in known]
    if missing:
        existing = list(org.applications.values_list("name", flat=True)[:20])
        raise Invalid(
            "applications",
            f"{show(missing[0])} is not an application of {org}; accepts "
            f"{', '.join(existing) or 'none yet'}. Name an existing application, or leave it "
            "empty to allow every application.",
        )
    return names or None


def _expiry(field: str, days: object) -> datetime | None:
    days = limits.bounded_int(field, days, 1, limits.MAX_EXPIRES_IN_DAYS, "days")
    return timezone.now() + timedelta(days=days) if days else None


def create(
    org: Organization,
    name: str,
    applications: object = None,
    rpm: object = None,
    tpm: object = None,
    concurrency: object = None,
    expires_in: object = None,
    *,
    actor: Membership,
) -> tuple[APIKey, str]:
    """A new key; the plain secret is returned once and never stored."""
    _admin(org, actor)
    name = limits.name("name", name, "key")
    apps = application_names(org, applications)
    caps = limits.caller_limits(rpm, tpm, concurrency)
    expires_at = _expiry("expiresInDays", expires_in)
    lookup, plain, digest = API_KEY.mint()
    try:
        with transaction.atomic():
            key = APIKey.objects.create(
                organization=org,
                name=name,
                lookup=lookup,
                secret_hash=digest,
                all_applications=apps is None,
                applications=apps or [],
                expires_at=expires_at,
                created_by=actor.user,
                **caps,
            )
    except IntegrityError:
        raise Invalid(
            "name",
            f"{org} has an API key named {name!r} already; accepts a new name. Choose another "
            f"name, or rotate {name} to get a new secret.",
            status=409,
        ) from None
    audit.record(
        org,
        actor.user,
        "apikey.create",
        "apikey",
        name,
        {"applications": apps or "all", **caps, "expiresAt": _iso(expires_at)},
    )
    return key, plain


def revoke(key: APIKey, *, actor: Membership) -> bool:
    """Refuse the key (and a rotated key's old secret) from now; False when it already was."""
    _admin(key.organization, actor)
    if key.revoked_at is not None:
        return False
    now = timezone.now()
    key.revoked_at = now
    fields = ["revoked_at"]
    if key.previous_lookup:
        key.previous_expires_at = now
        fields.append("previous_expires_at")
    key.save(update_fields=fields)
    audit.record(key.organization, actor.user, "apikey.revoke", "apikey", key.name)
    return True


def rotate(key: APIKey, grace_minutes: object = 60, *, actor: Membership) -> tuple[APIKey, str]:
    """A new secret for the same caller; the old one keeps working for `grace_minutes`."""
    _admin(key.organization, actor)
    if key.revoked_at is not None:
        raise Invalid(
            "name",
            f"{key.name} is revoked; a revoked key cannot be rotated. Create a new key instead.",
            status=409,
        )
    grace = limits.bounded_int(
        "graceMinutes", grace_minutes, 0, limits.MAX_GRACE_MINUTES, "minutes"
    )
    grace = 0 if grace is None else grace
    lookup, plain, digest = API_KEY.mint()
    now = timezone.now()
    key.previous_lookup, key.previous_secret_hash = key.lookup, key.secret_hash
    key.previous_expires_at = now + timedelta(minutes=grace)
    key.lookup, key.secret_hash = lookup, digest
    key.save(
        update_fields=[
            "lookup",
            "secret_hash",
            "previous_lookup",
            "previous_secret_hash",
            "previous_expires_at",
        ]
    )
    audit.record(
        key.organization, actor.user, "apikey.rotate", "apikey", key.name, {"graceMinutes": grace}
    )
    return key, plain


def state(key: APIKey) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return "expired"
    if key.previous_expires_at is not None and key.previous_expires_at > timezone.now():
        return "rotating"
    return "active"


@dataclass(frozen=True)
class Usage:
    requests: int = 0
    tokens: int = 0


def usage_by_key(keys: list[APIKey], since: datetime) -> dict[int, Usage]:
    """Requests and tokens per key since `since`, from metering's per-minute rows (reached
    through their relation to the key, so this app imports nothing of jobs)."""
    if not keys:
        return {}
    rows = (
        APIKey.objects.filter(pk__in=[k.pk for k in keys], usage_minutes__minute__gte=since)
        .values("pk")
        .annotate(
            requests=Sum("usage_minutes__requests"),
            prompt=Sum("usage_minutes__prompt_tokens"),
            completion=Sum("usage_minutes__completion_tokens"),
        )
    )
    return {
        row["pk"]: Usage(
            requests=row["requests"] or 0,
            tokens=(row["prompt"] or 0) + (row["completion"] or 0),
        )
        for row in rows
    }


def listing(org: Organization, *, actor: Membership) -> tuple[list[APIKey], dict[int, Usage]]:
    """The organisation's keys and their usage over the last day, for an admin."""
    _admin(org, actor)
    keys = list(APIKey.objects.filter(organization=org))
    return keys, usage_by_key(keys, timezone.now() - USAGE_WINDOW)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
