"""The one scheme for the secrets the console hands out (API keys, personal access tokens,
invitation links): how each is minted, parsed, hashed and compared. Pure: no Django, no rows.

A secret reads `<prefix><lookup><secret>`: the prefix says its kind (a log scanner or a
reader tells them apart), the lookup finds its row (or the gateway's snapshot entry) without
a scan, and the rest is 32 random bytes. Only the SHA-256 of the whole text is stored (unsalted
and fast on purpose: 256 random bits need no slow hash, and the gateway checks a key on every
call). The plain text exists once, in what `Kind.mint` returns, for the caller to show once and
forget.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

LOOKUP_LENGTH = 12  # hex characters, stored in the clear (unique per kind)
SECRET_BYTES = 32  # random bytes after the lookup: 43 url-safe characters
_LOOKUP = re.compile(f"[0-9a-f]{{{LOOKUP_LENGTH}}}")

Found = TypeVar("Found")


def digest(presented: str) -> str:
    """What is stored of a secret: the hex SHA-256 of its whole text (64 characters)."""
    return hashlib.sha256(presented.encode()).hexdigest()


# What an unknown lookup is compared against, so that unknown and wrong cost the same.
NO_SUCH = digest("no such secret")


class Minted(NamedTuple):
    lookup: str
    plain: str  # shown once to whoever asked for it, never stored
    digest: str  # what is stored


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of secret; kinds differ only in their prefix."""

    prefix: str

    def mint(self) -> Minted:
        lookup = secrets.token_hex(LOOKUP_LENGTH // 2)
        plain = f"{self.prefix}{lookup}{secrets.token_urlsafe(SECRET_BYTES)}"
        return Minted(lookup, plain, digest(plain))

    def lookup_of(self, presented: object) -> str | None:
        """The lookup of a secret of this kind, or None when `presented` is not shaped like one."""
        if not isinstance(presented, str) or not presented.startswith(self.prefix):
            return None
        start = len(self.prefix)
        lookup = presented[start : start + LOOKUP_LENGTH]
        return lookup if _LOOKUP.fullmatch(lookup) else None

    def masked(self, lookup: str) -> str:
        """How a stored secret is shown again: its prefix and lookup, never the rest."""
        return f"{self.prefix}{lookup}…"

    def recognise(
        self, presented: object, find: Callable[[str], Found | None], stored: Callable[[Found], str]
    ) -> Found | None:
        """What `presented` is the secret of, or None: `find(lookup)` gives the candidate and
        `stored(candidate)` its stored digest. Malformed, unknown and wrong all give None, and
        an unknown lookup costs the same hash and compare as a wrong secret."""
        lookup = self.lookup_of(presented)
        if lookup is None:
            return None
        found = find(lookup)
        if not verify(presented, stored(found) if found is not None else None):
            return None
        return found


API_KEY = Kind("sdk_")  # callers of the gateway (`/v1`)
PERSONAL_TOKEN = Kind("sdp_")  # a member's token for the REST API and the command line
INVITATION = Kind("sdi_")  # the last part of an invitation link
# The console's own load on one application while a benchmark runs (jobs/benchmark/): held
# by the worker running it only, never shown, not a member's key and never billed to one.
BENCHMARK = Kind("sdb_")
KINDS = (API_KEY, PERSONAL_TOKEN, INVITATION, BENCHMARK)


def verify(presented: str, stored: str | None) -> bool:
    """Whether `presented` hashes to `stored`, compared in constant time; None (no such
    lookup) is compared against a stand-in, so it costs what a wrong secret costs."""
    matches = hmac.compare_digest(stored if stored is not None else NO_SUCH, digest(presented))
    return matches and stored is not None
