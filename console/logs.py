"""What the console's logs keep: records bounded in size (no input, however large, becomes a
huge log line) and without the secrets the console hands out, and a refused request (4xx) as
one line, not a traceback.

Messages and tracebacks can carry values from a request (an exception's text quotes what it
could not read); each line is cut, and the record as a whole, so a log stays readable and a
single request cannot fill the disk.

A secret of the console's (an invitation link's `sdi_…`, a token's `sdp_…`, a key's `sdk_…`,
a password link's token) can stand in a path: Django's request log writes the path of every
refused request ("Gone: /access/join/sdi_…/" when a used invitation is opened again). Whatever
the line, only the secret's prefix is written.
"""

from __future__ import annotations

import logging
import re

from accesspolicies.secrets import KINDS

MAX_LINE = 2000  # characters kept of any one line of a record
MAX_RECORD = 20_000  # characters kept of a whole record (message and traceback)
HIDDEN = "…"
_PREFIXES = "|".join(re.escape(kind.prefix) for kind in KINDS)
# A secret wherever it stands (a path segment, a query value, a quoted word): its prefix and
# every character a secret is made of after it.
SECRET = re.compile(rf"(?<![A-Za-z0-9])({_PREFIXES})[A-Za-z0-9_\-]+")
# An admin's password link: /password/set/<user>/<token>/ (the page it redirects to says
# set-password instead of the token, and is kept).
PASSWORD_LINK = re.compile(r"(/password/set/[^/\s]+/)(?!set-password\b)[^/\s?#\"']+")


def hide_secrets(text: str) -> str:
    """`text` with every secret of the console's cut to its prefix, and a password link's
    token hidden."""
    text = SECRET.sub(lambda found: found.group(1) + HIDDEN, text)
    return PASSWORD_LINK.sub(lambda found: found.group(1) + HIDDEN, text)


def bound(text: str, max_line: int = MAX_LINE, max_record: int = MAX_RECORD) -> str:
    """`text` with each line and the whole cut to the limits, saying how much was left out."""
    lines = []
    for line in text.split("\n"):
        if len(line) > max_line:
            line = f"{line[:max_line]}…({len(line) - max_line} more characters)"
        lines.append(line)
    out = "\n".join(lines)
    if len(out) > max_record:
        out = f"{out[:max_record]}…({len(out) - max_record} more characters)"
    return out


class ConsoleFormatter(logging.Formatter):
    """logging.Formatter whose output holds no secret of the console's (`hide_secrets`) and is
    bounded (`bound`): every line the console writes goes through it."""

    def format(self, record: logging.LogRecord) -> str:
        return bound(hide_secrets(super().format(record)))


class OneLineClientErrors(logging.Filter):
    """Drop the traceback Django attaches to 403/404 records of `django.request`: a role check
    that refuses is expected, and a traceback per refusal buries the errors that matter."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
