"""Verified domains: an admin adds a domain, publishes the TXT record ServeDeck shows, and
presses Verify; ServeDeck looks the record up in DNS. Only verified domains serve Domain
exposure, and a domain is verified for one organisation only."""

from __future__ import annotations

import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver
from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone

from accesspolicies import audit
from accesspolicies.access import require
from accesspolicies.models import Membership, Organization, VerifiedDomain
from accesspolicies.problems import Invalid, show

WHAT = "domains"
CHALLENGE_LABEL = "_servedeck-challenge"
VALUE_PREFIX = "servedeck-verification="
MAX_DOMAINS = 100
MAX_TXT_SHOWN = 5  # TXT values quoted back in an error


class LookupFailed(Exception):
    """The TXT record could not be read; the message says why and what to do."""


def record_name(domain: str) -> str:
    return f"{CHALLENGE_LABEL}.{domain}"


def record_value(entry: VerifiedDomain) -> str:
    return f"{VALUE_PREFIX}{entry.challenge}"


def _admin(org: Organization, actor: Membership) -> None:
    require(actor, "admin", WHAT)
    if actor.organization_id != org.pk:
        raise Http404("No such organisation.")


def get_domain(actor: Membership, domain: str) -> VerifiedDomain:
    return VerifiedDomain.objects.object_for_member(actor, domain, "admin")


def verified_names(org: Organization) -> frozenset[str]:
    return frozenset(
        VerifiedDomain.objects.filter(organization=org, verified_at__isnull=False).values_list(
            "domain", flat=True
        )
    )


def normalized(value: object) -> str:
    """A lowercase domain name without a trailing dot, or Invalid naming what is accepted."""
    from jobs.manifest.checks import Reject, domain_name

    text = value.strip().lower().rstrip(".") if isinstance(value, str) else value
    try:
        return domain_name(text)
    except Reject as error:
        raise Invalid(
            "domain",
            f"{error.reason}; accepts a domain name such as models.example.com. "
            f"{error.fix or 'Give the domain only, without scheme or path.'}",
        ) from None


def add(org: Organization, domain: object, *, actor: Membership) -> VerifiedDomain:
    """A domain waiting for verification; its TXT record is `record_name`/`record_value`."""
    _admin(org, actor)
    name = normalized(domain)
    if VerifiedDomain.objects.filter(organization=org).count() >= MAX_DOMAINS:
        raise Invalid(
            "domain", f"{org} has {MAX_DOMAINS} domains; remove one you no longer use first."
        )
    try:
        with transaction.atomic():
            entry = VerifiedDomain.objects.create(organization=org, domain=name)
    except IntegrityError:
        raise Invalid(
            "domain",
            f"{name} is one of {org}'s domains already; verify that one.",
            status=409,
        ) from None
    audit.record(org, actor.user, "domain.add", "domain", name, {"record": record_name(name)})
    return entry


def _timeout() -> int:
    # Bounded: a verification holds the admin's request, and a zero would never ask.
    return min(max(settings.SERVEDECK_DNS_TIMEOUT, 1), 30)


def _resolver() -> dns.resolver.Resolver:
    address = settings.SERVEDECK_DNS_RESOLVER
    resolver = dns.resolver.Resolver(configure=address is None)
    if address is not None:
        host, port = address
        resolver.nameservers = [host]
        resolver.port = port
    resolver.timeout = resolver.lifetime = float(_timeout())
    resolver.cache = None
    return resolver


def lookup_txt(name: str) -> list[str]:
    """The TXT values at `name`, each its strings joined; LookupFailed says why there are none."""
    try:
        answer = _resolver().resolve(
            dns.name.from_text(name), dns.rdatatype.TXT, raise_on_no_answer=False, search=False
        )
    except dns.resolver.NXDOMAIN:
        raise LookupFailed(
            f"DNS has no name {name}. Publish the TXT record, then verify."
        ) from None
    except dns.resolver.LifetimeTimeout:
        raise LookupFailed(
            f"the DNS lookup of {name} timed out after {_timeout()} s. "
            "Try again in a moment; if it keeps failing, ask the operator to check the "
            "console's DNS resolver."
        ) from None
    except dns.resolver.NoNameservers:
        raise LookupFailed(
            f"no DNS server answered for {name}. Check that the domain's name servers are "
            "working, then verify again."
        ) from None
    except dns.exception.DNSException as error:
        raise LookupFailed(f"the DNS lookup of {name} failed ({type(error).__name__}).") from None
    values = []
    for rdata in answer.rrset or ():
        values.append(b"".join(rdata.strings).decode("utf-8", errors="replace"))
    return values


def verify(entry: VerifiedDomain, *, actor: Membership) -> bool:
    """Look the TXT record up; True when it holds the challenge. Refused when another
    organisation verified the domain already. The outcome is kept on the entry."""
    _admin(entry.organization, actor)
    taken = (
        VerifiedDomain.objects.filter(domain=entry.domain, verified_at__isnull=False)
        .exclude(organization=entry.organization)
        .exists()
    )
    if taken:
        raise Invalid(
            "domain",
            f"{entry.domain} is verified by another organisation; a domain serves one "
            "organisation. Use another domain, or ask the operator.",
            status=409,
        )
    name = record_name(entry.domain)
    expected = record_value(entry)
    error = ""
    try:
        values = lookup_txt(name)
    except LookupFailed as failed:
        error = str(failed)
    else:
        if expected not in values:
            found = ", ".join(show(v) for v in values[:MAX_TXT_SHOWN]) or "no TXT value"
            error = (
                f"{name} has {found}, not {expected!r}. Publish the TXT record exactly as "
                "shown (DNS changes can take a few minutes), then verify again."
            )
    entry.last_checked_at = timezone.now()
    entry.last_error = error
    if not error and entry.verified_at is None:
        entry.verified_at = entry.last_checked_at
    try:
        with transaction.atomic():
            entry.save(update_fields=["last_checked_at", "last_error", "verified_at"])
    except IntegrityError:  # another organisation verified it a moment ago
        entry.verified_at = None
        raise Invalid(
            "domain",
            f"{entry.domain} is verified by another organisation; a domain serves one "
            "organisation. Use another domain, or ask the operator.",
            status=409,
        ) from None
    action = "domain.verify" if not error else "domain.verify-failed"
    audit.record(
        entry.organization, actor.user, action, "domain", entry.domain, {"error": error[:200]}
    )
    return not error


def users_of(entry: VerifiedDomain) -> list[str]:
    # through the relation jobs adds to the organisation: this app does not import jobs
    return list(
        entry.organization.applications.filter(
            manifest__spec__access__domain=entry.domain
        ).values_list("name", flat=True)
    )


def delete(entry: VerifiedDomain, *, actor: Membership) -> None:
    _admin(entry.organization, actor)
    used = users_of(entry)
    if used:
        raise Invalid(
            "domain",
            f"{entry.domain} serves {', '.join(used[:10])}; removing it would take them off the "
            "domain. Change their exposure first.",
            status=409,
        )
    entry.delete()
    audit.record(entry.organization, actor.user, "domain.remove", "domain", entry.domain)
