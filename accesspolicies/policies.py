"""Access policies: which keys may call the applications that name the policy in
`spec.access.accessPolicy`, with per-caller limits that override the key's, from which client
networks. Admins only; every change is in the audit log."""

from __future__ import annotations

import ipaddress

from django.db import IntegrityError, transaction
from django.http import Http404

from accesspolicies import audit, limits
from accesspolicies.access import require
from accesspolicies.models import AccessPolicy, APIKey, Membership, Organization
from accesspolicies.problems import Invalid, searchable, show

WHAT = "access policies"
MAX_NETWORKS = 50
MAX_KEYS = 200


def _admin(org: Organization, actor: Membership) -> None:
    require(actor, "admin", WHAT)
    if actor.organization_id != org.pk:
        raise Http404("No such organisation.")


def get_policy(actor: Membership, name: str) -> AccessPolicy:
    return AccessPolicy.objects.object_for_member(actor, name, "admin")


def networks(value: object) -> list[str]:
    """Client networks as CIDRs (IPv4 or IPv6); empty allows any client."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise Invalid("allowedNetworks", "must be a list of CIDRs such as 10.0.0.0/8.")
    if len(value) > MAX_NETWORKS:
        raise Invalid(
            "allowedNetworks",
            f"{len(value)} networks; accepts at most {MAX_NETWORKS}. Combine them into wider "
            "networks.",
        )
    out: list[str] = []
    for raw in value:
        text = raw.strip()
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError:
            try:
                suggestion = f" Did you mean {ipaddress.ip_network(text, strict=False)}?"
                reason = "has host bits set"
            except ValueError:
                suggestion, reason = "", "is not a network"
            raise Invalid(
                "allowedNetworks",
                f"{show(text)} {reason}; accepts CIDRs such as 10.0.0.0/8, 192.168.1.7/32 or "
                f"2001:db8::/32.{suggestion}",
            ) from None
        if str(network) not in out:
            out.append(str(network))
    return out


def key_names(org: Organization, value: object) -> list[APIKey] | None:
    """None (every key of the organisation) or the named keys, each one of the organisation's."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise Invalid("keys", "must be a list of API key names, or empty for every key.")
    if len(value) > MAX_KEYS:
        raise Invalid("keys", f"{len(value)} keys; accepts at most {MAX_KEYS}.")
    names = list(dict.fromkeys(v.strip() for v in value if v.strip()))
    findable = [n for n in names if searchable(n, 100)]
    found = {k.name: k for k in APIKey.objects.filter(organization=org, name__in=findable)}
    missing = [n for n in names if n not in found]
    if missing:
        known = list(APIKey.objects.filter(organization=org).values_list("name", flat=True)[:20])
        raise Invalid(
            "keys",
            f"{show(missing[0])} is not an API key of {org}; accepts "
            f"{', '.join(known) or 'none yet'}. "
            "Name an existing key, or leave it empty for every key.",
        )
    return [found[n] for n in names]


def _fields(org, keys, rpm, tpm, concurrency, allowed_networks):
    chosen = key_names(org, keys)
    values = {
        **limits.caller_limits(rpm, tpm, concurrency),
        "allowed_networks": networks(allowed_networks),
        "all_keys": chosen is None,
    }
    return chosen, values


def _summary(policy: AccessPolicy, chosen: list[APIKey] | None) -> dict:
    return {
        "keys": "all" if chosen is None else [k.name for k in chosen],
        "requests_per_minute": policy.requests_per_minute,
        "tokens_per_minute": policy.tokens_per_minute,
        "concurrent_requests": policy.concurrent_requests,
        "allowedNetworks": policy.allowed_networks,
    }


def create(
    org: Organization,
    name: str,
    keys: object = None,
    rpm: object = None,
    tpm: object = None,
    concurrency: object = None,
    allowed_networks: object = None,
    *,
    actor: Membership,
) -> AccessPolicy:
    _admin(org, actor)
    name = limits.name("name", name, "policy")
    chosen, values = _fields(org, keys, rpm, tpm, concurrency, allowed_networks)
    try:
        with transaction.atomic():
            policy = AccessPolicy.objects.create(organization=org, name=name, **values)
            policy.keys.set(chosen or [])
    except IntegrityError:
        raise Invalid(
            "name",
            f"{org} has an access policy named {name!r} already; accepts a new name. Choose "
            "another name, or change that policy.",
            status=409,
        ) from None
    audit.record(org, actor.user, "policy.create", "policy", name, _summary(policy, chosen))
    return policy


def update(
    policy: AccessPolicy,
    keys: object = None,
    rpm: object = None,
    tpm: object = None,
    concurrency: object = None,
    allowed_networks: object = None,
    *,
    actor: Membership,
) -> AccessPolicy:
    """Replace the policy's rules (its name stays: applications name it)."""
    _admin(policy.organization, actor)
    chosen, values = _fields(policy.organization, keys, rpm, tpm, concurrency, allowed_networks)
    with transaction.atomic():
        for field, value in values.items():
            setattr(policy, field, value)
        policy.save()
        policy.keys.set(chosen or [])
    audit.record(
        policy.organization,
        actor.user,
        "policy.update",
        "policy",
        policy.name,
        _summary(policy, chosen),
    )
    return policy


def users_of(policy: AccessPolicy) -> list[str]:
    """Names of the applications whose manifest names the policy (through the relation jobs
    adds to the organisation: this app does not import jobs)."""
    return list(
        policy.organization.applications.filter(
            manifest__spec__access__accessPolicy=policy.name
        ).values_list("name", flat=True)
    )


def delete(policy: AccessPolicy, *, actor: Membership) -> None:
    """Delete a policy no application names; refused, naming them, when some do."""
    _admin(policy.organization, actor)
    used = users_of(policy)
    if used:
        raise Invalid(
            "name",
            f"{policy.name} is the access policy of {', '.join(used[:10])}; deleting it would "
            "leave them without one. Point those applications at another policy first.",
            status=409,
        )
    name = policy.name
    policy.delete()
    audit.record(policy.organization, actor.user, "policy.delete", "policy", name)
