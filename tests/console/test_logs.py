"""Log records are bounded: a request's text in a message or a traceback never makes a huge
line (a 1 KB alias bomb once wrote a 2 GiB one)."""

import io
import logging

from django.conf import settings
from django.utils.module_loading import import_string

from console.logs import MAX_LINE, MAX_RECORD


def test_the_consoles_log_lines_are_bounded():
    plain = settings.LOGGING["formatters"]["plain"]
    handler_config = settings.LOGGING["handlers"]["console"]
    assert handler_config["formatter"] == "plain"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(import_string(plain["()"])(plain["format"]))
    logger = logging.getLogger("servedeck.test.logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError("v" * 1_000_000)
        except ValueError:
            logger.exception("could not read %s", "x" * 1_000_000)
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert "could not read xxx" in written and "more characters" in written
    assert len(written) < MAX_RECORD + 200
    assert max(len(line) for line in written.splitlines()) < MAX_LINE + 100
