"""What the console's logs keep: records bounded in size (no input, however large, becomes a
huge log line), and a refused request (4xx) as one line, not a traceback.

Messages and tracebacks can carry values from a request (an exception's text quotes what it
could not read); each line is cut, and the record as a whole, so a log stays readable and a
single request cannot fill the disk.
"""

from __future__ import annotations

import logging

MAX_LINE = 2000  # characters kept of any one line of a record
MAX_RECORD = 20_000  # characters kept of a whole record (message and traceback)


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


class BoundedFormatter(logging.Formatter):
    """logging.Formatter whose output is bounded (see `bound`)."""

    def format(self, record: logging.LogRecord) -> str:
        return bound(super().format(record))


class OneLineClientErrors(logging.Filter):
    """Drop the traceback Django attaches to 403/404 records of `django.request`: a role check
    that refuses is expected, and a traceback per refusal buries the errors that matter."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
