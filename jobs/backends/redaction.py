"""Secrets taken out of what a model server wrote, in one place for the backends (a replica's
last lines in a status reason) and the log readers (the logs page and API).

What is redacted: every value of an environment whose name says it is a secret (TOKEN, KEY,
SECRET, PASSWORD...), values the caller adds (the Hugging Face token a profile gives), the same
values of the console's own environment (the operator's tokens), and anything shaped like a
known token (hf_..., sdk_/sdp_ keys, Bearer credentials) whoever wrote it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from accesspolicies.secrets import KINDS

# Variable names that say their value is a secret (the model servers' environment too).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")
MAX_LINE_CHARS = 4000
REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would blank out ordinary words
# Settings of the console that hold credentials though their names do not say so.
CREDENTIAL_NAMES = frozenset({"DATABASE_URL", "REDIS_URL", "CHANNEL_REDIS_URL"})
# Hugging Face tokens, ServeDeck's own secrets (every kind: keys, tokens, invitations), and
# Bearer credentials.
OUR_PREFIXES = "|".join(re.escape(kind.prefix) for kind in KINDS)
TOKEN_SHAPES = re.compile(
    rf"\bhf_[A-Za-z0-9]{{20,}}|\b(?:{OUR_PREFIXES})[A-Za-z0-9_\-]{{16,}}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,}=*"
)
# The longest token shape looked at whole; a longer one is still taken out, its tail left.
TOKEN_SHAPE_CHARS = 512


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return upper in CREDENTIAL_NAMES or any(word in upper for word in SECRET_WORDS)


def secret_values(*environments: Mapping[str, str], extra: Iterable[str | None] = ()) -> set[str]:
    """The values to take out of logs: those of secret-looking names, and `extra` ones."""
    found = {v for env in environments for k, v in env.items() if looks_secret(k) and v}
    found |= {v for v in extra if v}
    return {v for v in found if len(v) >= MIN_SECRET_CHARS}


def redact(lines: Iterable[str], secrets: Iterable[str]) -> list[str]:
    """The lines with every secret value and token-shaped word replaced (longest first, so a
    value containing another is taken out whole); each line cut to MAX_LINE_CHARS after, so
    the cut never leaves the first characters of a secret that redaction would not know."""
    ordered = sorted(set(secrets), key=len, reverse=True)
    # Enough beyond the cut for any secret or token shape that starts before it.
    margin = max([len(v) for v in ordered] + [TOKEN_SHAPE_CHARS])
    out = []
    for line in lines:
        line = line[: MAX_LINE_CHARS + margin]
        for value in ordered:
            if value in line:
                line = line.replace(value, REDACTED)
        out.append(TOKEN_SHAPES.sub(REDACTED, line)[:MAX_LINE_CHARS])
    return out


def operator_secrets() -> set[str]:
    """The console's own secret-looking values (the operator's HF token among them)."""
    return secret_values(os.environ)
