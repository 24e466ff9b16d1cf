"""Logging filters: a refused request (4xx) is one line, not a traceback; only 5xx keep theirs."""

import logging


class OneLineClientErrors(logging.Filter):
    """Drop the traceback Django attaches to 403/404 records of `django.request`: a role check
    that refuses is expected, and a traceback per refusal buries the errors that matter."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
