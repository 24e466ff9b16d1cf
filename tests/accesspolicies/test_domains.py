"""Verified domains: the TXT record, a real DNS lookup against a DNS server on loopback, one
organisation per domain, admins only; and Domain exposure in the dry run."""

import pytest
from django.urls import reverse

from accesspolicies import domains, policies
from accesspolicies.models import AuditEntry, VerifiedDomain
from accesspolicies.problems import Invalid
from jobs import deploy
from tests.accesspolicies.conftest import make_application
from tests.fakes.dns import FakeDNS
from tests.helpers import SHORTEST, bearer


@pytest.fixture
def dns_server(settings):
    with FakeDNS().serve() as server:
        settings.SERVEDECK_DNS_RESOLVER = server.address
        settings.SERVEDECK_DNS_TIMEOUT = 1
        yield server


def publish(server, entry):
    server.publish(domains.record_name(entry.domain), domains.record_value(entry))


def test_the_record_to_publish(org, admin):
    entry = domains.add(org, " Models.Example.COM. ", actor=admin)
    assert entry.domain == "models.example.com"
    assert domains.record_name(entry.domain) == "_servedeck-challenge.models.example.com"
    assert domains.record_value(entry) == f"servedeck-verification={entry.challenge}"
    assert len(entry.challenge) >= 32


@pytest.mark.parametrize(
    "value, words",
    [
        ("https://models.example.com", "is a URL, not a domain name"),
        ("not a domain", "is not a lowercase domain name"),
        ("x" * 300 + ".com", "accepts a domain name such as models.example.com"),
        ("", "accepts a domain name"),
    ],
)
def test_a_bad_domain_is_refused_naming_what_is_accepted(org, admin, value, words):
    with pytest.raises(Invalid) as raised:
        domains.add(org, value, actor=admin)
    assert raised.value.field == "domain" and words in raised.value.message
    assert len(raised.value.message) < 300


def test_verify_succeeds_when_the_txt_record_holds_the_challenge(dns_server, org, admin):
    entry = domains.add(org, "models.example.com", actor=admin)
    dns_server.publish(
        domains.record_name(entry.domain), "some-other=record", domains.record_value(entry)
    )
    assert domains.verify(entry, actor=admin)
    entry.refresh_from_db()
    assert entry.verified_at and entry.last_error == ""
    assert dns_server.queries == ["_servedeck-challenge.models.example.com"]
    assert domains.verified_names(org) == {"models.example.com"}
    assert AuditEntry.objects.filter(action="domain.verify", object_name=entry.domain).exists()


def test_a_wrong_value_is_not_verified_and_says_what_was_found(dns_server, org, admin):
    entry = domains.add(org, "models.example.com", actor=admin)
    dns_server.publish(domains.record_name(entry.domain), "servedeck-verification=wrong")
    assert not domains.verify(entry, actor=admin)
    entry.refresh_from_db()
    assert entry.verified_at is None
    assert "'servedeck-verification=wrong'" in entry.last_error
    assert entry.challenge in entry.last_error and "Publish the TXT record" in entry.last_error


def test_nxdomain_is_not_verified(dns_server, org, admin):
    entry = domains.add(org, "models.example.com", actor=admin)
    assert not domains.verify(entry, actor=admin)
    entry.refresh_from_db()
    assert entry.verified_at is None
    assert "DNS has no name _servedeck-challenge.models.example.com" in entry.last_error


def test_a_dns_server_that_never_answers_times_out(dns_server, org, admin):
    entry = domains.add(org, "models.example.com", actor=admin)
    dns_server.silent.add(domains.record_name(entry.domain))
    assert not domains.verify(entry, actor=admin)
    entry.refresh_from_db()
    assert entry.verified_at is None and "timed out after 1 s" in entry.last_error


def test_a_domain_verified_by_another_organisation_cannot_be_verified_again(
    dns_server, org, other_org, admin, outsider
):
    theirs = domains.add(other_org, "models.example.com", actor=outsider)
    publish(dns_server, theirs)
    assert domains.verify(theirs, actor=outsider)
    ours = domains.add(org, "models.example.com", actor=admin)
    publish(dns_server, ours)
    with pytest.raises(Invalid, match="verified by another organisation") as raised:
        domains.verify(ours, actor=admin)
    assert raised.value.status == 409
    assert not VerifiedDomain.objects.get(pk=ours.pk).verified_at


def test_a_domain_in_use_cannot_be_removed(org, admin):
    entry = domains.add(org, "models.example.com", actor=admin)
    make_application(org, "chat", exposure="Domain", domain="models.example.com")
    with pytest.raises(Invalid, match="serves chat"):
        domains.delete(entry, actor=admin)


# --- Domain exposure in the dry run ------------------------------------------------------

DOMAIN_MANIFEST = SHORTEST + (
    "  access:\n    exposure: Domain\n    domain: models.example.com\n    accessPolicy: public\n"
)


def _paths(run):
    return {p.path: p.message for p in run.refusals}


def test_domain_exposure_needs_a_verified_domain_and_an_existing_policy(dns_server, org, admin):
    refused = _paths(deploy.dry_run(DOMAIN_MANIFEST, org))
    assert (
        "not a verified domain of the organisation, and there are none yet"
        in (refused["spec.access.domain"])
    )
    assert (
        "not an access policy of the organisation, and there are none yet"
        in (refused["spec.access.accessPolicy"])
    )
    entry = domains.add(org, "models.example.com", actor=admin)
    policies.create(org, "internal-only", actor=admin)
    refused = _paths(deploy.dry_run(DOMAIN_MANIFEST, org))
    assert "Verify the domain under Team" in refused["spec.access.domain"]
    assert "internal-only" in refused["spec.access.accessPolicy"]
    publish(dns_server, entry)
    domains.verify(entry, actor=admin)
    policies.create(org, "public", actor=admin)
    run = deploy.dry_run(DOMAIN_MANIFEST, org)
    assert run.ok, run.refusals


def test_another_organisations_policy_and_domain_do_not_count(dns_server, org, other_org, outsider):
    entry = domains.add(other_org, "models.example.com", actor=outsider)
    publish(dns_server, entry)
    domains.verify(entry, actor=outsider)
    policies.create(other_org, "public", actor=outsider)
    refused = _paths(deploy.dry_run(DOMAIN_MANIFEST, org))
    assert {"spec.access.domain", "spec.access.accessPolicy"} <= set(refused)


# --- pages and API -----------------------------------------------------------------------


def test_the_page_shows_the_record_and_verify_works(dns_server, as_admin, org):
    response = as_admin.post(reverse("accesspolicies:domain-add"), {"domain": "models.example.com"})
    assert response.status_code == 302
    entry = VerifiedDomain.objects.get()
    page = as_admin.get(reverse("accesspolicies:domains")).content.decode()
    assert "_servedeck-challenge.models.example.com" in page
    assert f"servedeck-verification={entry.challenge}" in page
    verify = reverse("accesspolicies:domain-verify", args=[entry.domain])
    page = as_admin.post(verify, follow=True).content.decode()
    assert "is not verified" in page and "DNS has no name" in page
    publish(dns_server, entry)
    page = as_admin.post(verify, follow=True).content.decode()
    assert "models.example.com is verified" in page


def test_the_api_adds_verifies_and_lists(dns_server, client, admin, org):
    headers = bearer(admin)
    created = client.post(
        "/api/v1/domains", {"domain": "models.example.com"}, "application/json", **headers
    )
    assert created.status_code == 201
    body = created.json()
    assert body["recordType"] == "TXT" and not body["verified"]
    dns_server.publish(body["recordName"], body["recordValue"])
    verified = client.post("/api/v1/domains/models.example.com/verify", **headers).json()
    assert verified["verified"] and verified["lastError"] == ""
    assert [d["domain"] for d in client.get("/api/v1/domains", **headers).json()] == [
        "models.example.com"
    ]


@pytest.mark.parametrize(
    "name, args", [("domains", []), ("domain-verify", ["x.com"]), ("domain-remove", ["x.com"])]
)
def test_only_admins_manage_domains(org, admin, as_deployer, as_viewer, as_outsider, name, args):
    domains.add(org, "x.com", actor=admin)
    url = reverse(f"accesspolicies:{name}", args=args)
    method = "get" if not args else "post"
    for client in (as_deployer, as_viewer):
        assert getattr(client, method)(url).status_code == 403
    if args:
        assert as_outsider.post(url).status_code == 404
    assert VerifiedDomain.objects.filter(domain="x.com").exists()


# --- the resolver setting ----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("127.0.0.1", ("127.0.0.1", 53)),
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("[::1]:5353", ("::1", 5353)),
        ("[::1]", ("::1", 53)),
        ("dns.internal:53", ("dns.internal", 53)),
    ],
)
def test_the_resolver_address_is_host_and_port(raw, expected):
    from console.env import parse_host_port

    assert parse_host_port(raw, 53) == expected


@pytest.mark.parametrize("raw", ["127.0.0.1:0", "127.0.0.1:http", ":53", "[::1]x", "h:99999"])
def test_a_bad_resolver_address_is_refused(raw):
    from console.env import parse_host_port

    with pytest.raises(ValueError, match="host:port|\\[address\\]:port"):
        parse_host_port(raw, 53)


def test_a_bad_resolver_setting_stops_start_up_naming_it(tmp_path):
    from tests.console.test_settings import start

    result = start({"SERVEDECK_DNS_RESOLVER": "127.0.0.1:dns", "SERVEDECK_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "SERVEDECK_DNS_RESOLVER" in result.stderr.splitlines()[-1]


# --- the wizard's Access step ------------------------------------------------------------


def test_the_wizard_offers_the_domain_once_verified_with_a_policy(as_deployer, org, admin):
    import re

    from django.utils import timezone

    from tests.jobs.wizard.test_wizard_views import start, text, url

    draft = start(as_deployer)
    assert re.search(r'value="Domain" disabled', text(as_deployer.get(url("access", draft))))
    VerifiedDomain.objects.create(
        organization=org, domain="models.example.com", verified_at=timezone.now()
    )
    policies.create(org, "public", actor=admin)
    body = text(as_deployer.get(url("access", draft)))
    assert not re.search(r'value="Domain" disabled', body)
    assert '<option value="models.example.com"' in body and '<option value="public"' in body
    response = as_deployer.post(
        url("access", draft),
        {
            "exposure": "Domain",
            "domain": "models.example.com",
            "access_policy": "public",
            "go": "next",
        },
    )
    assert response["Location"] == url("api", draft)
    draft.refresh_from_db()
    assert draft.manifest["spec"]["access"] == {
        "exposure": "Domain",
        "domain": "models.example.com",
        "accessPolicy": "public",
    }
    # A domain that is not the organisation's (a forged form) is refused by the manifest rules.
    as_deployer.post(
        url("access", draft),
        {
            "exposure": "Domain",
            "domain": "evil.example.com",
            "access_policy": "public",
            "go": "next",
        },
    )
    page = text(as_deployer.get(url("access", draft)))
    assert 'id="domain-error"' in page and "evil.example.com" in page
    assert as_deployer.get(url("review", draft))["Location"] == url("access", draft)
