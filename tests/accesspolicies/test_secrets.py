"""The one secret scheme (API keys, personal access tokens, invitations): a minted secret is
recognised, and a wrong, unknown or malformed one is refused the same way. No database."""

import hashlib
import re

import pytest

from accesspolicies import secrets as scheme
from accesspolicies.secrets import API_KEY, INVITATION, KINDS, PERSONAL_TOKEN

KIND_NAMES = {API_KEY: "api key", PERSONAL_TOKEN: "personal token", INVITATION: "invitation"}


@pytest.fixture(params=KINDS, ids=KIND_NAMES.get)
def kind(request):
    return request.param


def test_the_kinds_have_their_prefixes_and_no_two_share_one():
    assert [k.prefix for k in KINDS] == ["sdk_", "sdp_", "sdi_", "sdb_"]
    assert len({k.prefix for k in KINDS}) == len(KINDS)


def test_a_minted_secret_parses_to_its_lookup_and_verifies(kind):
    lookup, plain, digest = kind.mint()
    assert re.fullmatch(re.escape(kind.prefix) + r"[0-9a-f]{12}[A-Za-z0-9_-]{43}", plain)
    assert plain[len(kind.prefix) :].startswith(lookup)
    assert kind.lookup_of(plain) == lookup
    assert scheme.verify(plain, digest)
    assert kind.masked(lookup) == f"{kind.prefix}{lookup}…"


def test_the_stored_digest_is_the_hex_sha256_of_the_whole_text(kind):
    """The format rows made before the scheme was one module hold: they must keep verifying."""
    plain = f"{kind.prefix}abcdef012345" + "x" * 43
    stored = hashlib.sha256(plain.encode()).hexdigest()
    assert scheme.digest(plain) == stored and len(stored) == 64
    assert kind.recognise(plain, {"abcdef012345": stored}.get, lambda found: found) == stored


def test_two_mints_share_nothing(kind):
    one, two = kind.mint(), kind.mint()
    assert one.lookup != two.lookup and one.plain != two.plain and one.digest != two.digest


def _stored(*minted):
    return {m.lookup: m for m in minted}


def _wrong(plain: str) -> str:
    """The same lookup with another secret after it."""
    return plain[:-1] + ("A" if plain[-1] != "A" else "B")


@pytest.mark.parametrize(
    "case",
    ["right", "wrong secret", "unknown lookup", "revoked (gone from the rows)"],
)
def test_recognise_finds_the_right_one_and_refuses_wrong_and_unknown_alike(kind, case, monkeypatch):
    minted, other = kind.mint(), kind.mint()
    rows = _stored(minted)
    presented = {
        "right": minted.plain,
        "wrong secret": _wrong(minted.plain),
        "unknown lookup": other.plain,
        "revoked (gone from the rows)": minted.plain,
    }[case]
    if case.startswith("revoked"):
        rows = {}
    hashed = []
    real_digest = scheme.digest
    monkeypatch.setattr(scheme, "digest", lambda text: hashed.append(text) or real_digest(text))

    found = kind.recognise(presented, rows.get, lambda row: row.digest)

    assert found == (minted if case == "right" else None)
    # unknown costs the same hash and compare as wrong: no early answer says which it was
    assert hashed == [presented]


def test_verify_refuses_a_missing_row_and_a_wrong_secret(kind):
    lookup, plain, digest = kind.mint()
    assert scheme.verify(plain, digest)
    assert not scheme.verify(plain, None)
    assert not scheme.verify(_wrong(plain), digest)
    assert not scheme.verify(plain, scheme.NO_SUCH)


TAIL = "x" * 43
MALFORMED = [  # {p} is the kind's own prefix
    "",
    "{p}",
    "{p}abc",  # lookup too short
    "{p}abcdef01234",  # one short
    "{p}ABCDEF012345" + TAIL,  # lookups are lower-case hex
    "{p}abcdef01234z" + TAIL,
    "{p}abcdef01\x00345" + TAIL,
    " {p}abcdef012345" + TAIL,
    "Bearer {p}abcdef012345" + TAIL,
    "abcdef012345" + TAIL,  # no prefix
]


@pytest.mark.parametrize("presented", [*MALFORMED, None, 42, b"sdk_abcdef012345"], ids=repr)
def test_a_malformed_secret_is_refused_before_any_lookup(kind, presented):
    if isinstance(presented, str):
        presented = presented.format(p=kind.prefix)
    looked_up = []

    def find(lookup):
        looked_up.append(lookup)

    assert kind.lookup_of(presented) is None
    assert kind.recognise(presented, find, lambda row: row) is None
    assert looked_up == []


def test_a_secret_of_another_kind_is_malformed_for_this_one(kind):
    for other in KINDS:
        if other is not kind:
            lookup, plain, digest = other.mint()
            assert kind.lookup_of(plain) is None
            assert kind.recognise(plain, {lookup: digest}.get, lambda row: row) is None
