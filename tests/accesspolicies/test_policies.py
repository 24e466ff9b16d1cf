"""Access policies: keys (all or some), per-caller limits, client networks; admins only."""

import pytest
from django.urls import reverse

from accesspolicies import keys, policies
from accesspolicies.models import AccessPolicy, AuditEntry
from accesspolicies.problems import Invalid
from tests.accesspolicies.conftest import make_application
from tests.helpers import bearer, problems


def test_a_policy_for_some_keys_with_limits_and_networks(org, admin):
    bot, _ = keys.create(org, "bot", actor=admin)
    policy = policies.create(
        org, "partners", ["bot"], 10, None, 2, ["10.0.0.0/8", "2001:db8::/32"], actor=admin
    )
    policy.refresh_from_db()
    assert not policy.all_keys and list(policy.keys.all()) == [bot]
    assert (policy.requests_per_minute, policy.tokens_per_minute) == (10, None)
    assert policy.allowed_networks == ["10.0.0.0/8", "2001:db8::/32"]
    entry = AuditEntry.objects.get(action="policy.create")
    assert entry.detail["keys"] == ["bot"]


def test_no_keys_named_means_every_key(org, admin):
    policy = policies.create(org, "public", actor=admin)
    assert policy.all_keys and policy.allowed_networks == []


@pytest.mark.parametrize(
    "networks, words",
    [
        (["10.0.0.1/8"], "'10.0.0.1/8' has host bits set; accepts CIDRs such as 10.0.0.0/8"),
        (["10.0.0.1/8"], "Did you mean 10.0.0.0/8?"),
        (["example.com"], "'example.com' is not a network"),
        (["10.0.0.0/33"], "is not a network"),
        ([f"10.0.{i}.0/24" for i in range(51)], "51 networks; accepts at most 50"),
        ("10.0.0.0/8 nonsense", "'nonsense' is not a network"),
    ],
)
def test_bad_networks_are_refused_with_the_fix(org, admin, networks, words):
    with pytest.raises(Invalid) as raised:
        policies.create(org, "p", allowed_networks=networks, actor=admin)
    assert raised.value.field == "allowedNetworks" and words in raised.value.message
    assert not AccessPolicy.objects.exists()


def test_keys_of_another_organisation_are_not_found(org, other_org, admin, outsider):
    keys.create(other_org, "their-bot", actor=outsider)
    with pytest.raises(Invalid, match="'their-bot' is not an API key of Acme"):
        policies.create(org, "p", ["their-bot"], actor=admin)


def test_names_and_limits_are_checked(org, admin):
    with pytest.raises(Invalid, match="is not a policy name"):
        policies.create(org, "Has Spaces", actor=admin)
    with pytest.raises(Invalid, match="accepts 1 to 1000000 requests per minute"):
        policies.create(org, "p", rpm=2_000_000, actor=admin)
    policies.create(org, "p", actor=admin)
    with pytest.raises(Invalid) as raised:
        policies.create(org, "p", actor=admin)
    assert raised.value.status == 409


def test_update_replaces_the_rules_and_delete_is_refused_while_used(org, admin):
    keys.create(org, "bot", actor=admin)
    policy = policies.create(org, "public", actor=admin)
    policies.update(policy, ["bot"], 5, 100, None, ["192.168.0.0/16"], actor=admin)
    policy.refresh_from_db()
    assert not policy.all_keys and policy.requests_per_minute == 5
    make_application(
        org, "chat", exposure="Domain", domain="models.example.com", accessPolicy="public"
    )
    with pytest.raises(Invalid, match="the access policy of chat"):
        policies.delete(policy, actor=admin)
    policies.create(org, "spare", actor=admin)
    policies.delete(AccessPolicy.objects.get(name="spare"), actor=admin)
    assert list(AccessPolicy.objects.values_list("name", flat=True)) == ["public"]
    assert AuditEntry.objects.filter(action="policy.update").count() == 1
    assert AuditEntry.objects.filter(action="policy.delete", object_name="spare").exists()


def test_the_pages_create_and_edit(as_admin, org, admin):
    keys.create(org, "bot", actor=admin)
    response = as_admin.post(
        reverse("accesspolicies:policy-create"),
        {"name": "partners", "keys": ["bot"], "allowed_networks": "10.0.0.0/8\n172.16.0.0/12"},
    )
    assert response.status_code == 302
    policy = AccessPolicy.objects.get(name="partners")
    assert policy.allowed_networks == ["10.0.0.0/8", "172.16.0.0/12"]
    edit = reverse("accesspolicies:policy-edit", args=["partners"])
    page = as_admin.get(edit).content.decode()
    assert "172.16.0.0/12" in page
    response = as_admin.post(edit, {"allowed_networks": "10.0.0.1/8"})
    assert response.status_code == 400 and "Did you mean 10.0.0.0/8?" in response.content.decode()
    response = as_admin.post(edit, {"requests_per_minute": "7"})
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.all_keys and policy.requests_per_minute == 7 and policy.allowed_networks == []


def test_the_api(client, org, admin):
    headers = bearer(admin)
    created = client.post(
        "/api/v1/policies",
        {"name": "public", "requestsPerMinute": 30, "allowedNetworks": ["10.0.0.0/8"]},
        "application/json",
        **headers,
    )
    assert created.status_code == 201 and created.json()["keys"] is None
    bad = client.put(
        "/api/v1/policies/public", {"allowedNetworks": ["nope"]}, "application/json", **headers
    )
    assert bad.status_code == 400 and problems(bad)[0]["path"] == "allowedNetworks"
    changed = client.put(
        "/api/v1/policies/public", {"concurrentRequests": 3}, "application/json", **headers
    ).json()
    assert changed["concurrentRequests"] == 3 and changed["allowedNetworks"] == []
    assert [p["name"] for p in client.get("/api/v1/policies", **headers).json()] == ["public"]
    assert client.delete("/api/v1/policies/public", **headers).status_code == 204


def test_only_admins_manage_policies(
    client, org, admin, deployer, viewer, outsider, as_deployer, as_viewer, as_outsider
):
    policies.create(org, "public", actor=admin)
    for member, pages in ((deployer, as_deployer), (viewer, as_viewer)):
        assert client.get("/api/v1/policies", **bearer(member)).status_code == 403
        assert pages.get(reverse("accesspolicies:policies")).status_code == 403
        url = reverse("accesspolicies:policy-delete", args=["public"])
        assert pages.post(url).status_code == 403
    assert client.get("/api/v1/policies/public", **bearer(outsider)).status_code == 404
    url = reverse("accesspolicies:policy-edit", args=["public"])
    assert as_outsider.get(url).status_code == 404
    assert AccessPolicy.objects.filter(name="public").exists()


# --- any input gives a clear error, never a crash -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from accesspolicies import limits  # noqa: E402

ANYTHING = st.one_of(
    st.none(),
    st.text(max_size=300),
    st.integers(),
    st.booleans(),
    st.lists(st.text(max_size=60), max_size=60),
    st.floats(allow_nan=True),
)


@settings(max_examples=300, deadline=None)
@given(value=ANYTHING)
def test_networks_accept_or_refuse_anything_clearly(value):
    try:
        out = policies.networks(value)
    except Invalid as error:
        assert error.field == "allowedNetworks" and len(error.message) < 400
    else:
        assert isinstance(out, list) and len(out) <= policies.MAX_NETWORKS


@settings(max_examples=300, deadline=None)
@given(name=ANYTHING, number=ANYTHING)
def test_names_and_limits_accept_or_refuse_anything_clearly(name, number):
    try:
        assert limits.NAME_RE.fullmatch(limits.name("name", name, "key"))
    except Invalid as error:
        assert error.field == "name" and len(error.message) < 400
    try:
        value = limits.bounded_int("requestsPerMinute", number, 1, 100, "requests per minute")
    except Invalid as error:
        assert error.field == "requestsPerMinute" and len(error.message) < 400
    else:
        assert value is None or 1 <= value <= 100


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=ANYTHING)
def test_application_and_key_lists_accept_or_refuse_anything_clearly(org, admin, value):
    from accesspolicies import keys as key_verbs

    for check, field in (
        (key_verbs.application_names, "applications"),
        (policies.key_names, "keys"),
    ):
        try:
            check(org, value)
        except Invalid as error:
            assert error.field == field and len(error.message) < 600
