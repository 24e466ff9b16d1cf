"""How text written in Python (for the command line and the API too) reads on a page: escaped,
`code` in backticks as <code>, ISO timestamps as local date and time; and a backend's status
split into its first line (the reason) and the lines after it (a failed server's log lines)."""

from __future__ import annotations

import re
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeData, SafeString

register = template.Library()

CODE = r"`(?P<code>[^`\n]+)`"
ISO_TIME = (
    r"(?P<time>\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2}))"
)
MARKED = re.compile(f"{CODE}|{ISO_TIME}")


def _time(iso: str) -> str:
    """`iso` as a <time> in the console's time zone; the text as it is when it is no time."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return conditional_escape(iso)
    local = timezone.localtime(moment)
    shown = f"{date_format(local, 'j M Y, H:i:s')} {local:%Z}".strip()  # 1 Dec 2026, 12:28:27 UTC
    return format_html('<time datetime="{}">{}</time>', iso, shown)


@register.filter
def readable(text: object) -> SafeString:
    """The text escaped; `span` in backticks as <code>span</code>, each ISO 8601 timestamp as
    the local date and time (the ISO kept in the <time> element's datetime)."""
    if isinstance(text, SafeData):  # HTML already (format_html): shown as it is
        return text
    text = "" if text is None else str(text)
    out, last = [], 0
    for found in MARKED.finditer(text):
        out.append(conditional_escape(text[last : found.start()]))
        if found.group("code") is not None:
            out.append(format_html("<code>{}</code>", found.group("code")))
        else:
            out.append(_time(found.group("time")))
        last = found.end()
    out.append(conditional_escape(text[last:]))
    return format_html_join("", "{}", ((part,) for part in out))  # each part is safe already


@register.filter
def first_line(text: object) -> str:
    return ("" if text is None else str(text)).split("\n", 1)[0]


@register.filter
def later_lines(text: object) -> str:
    """Everything after the first line (a failed server's last log lines), for a <pre>."""
    parts = ("" if text is None else str(text)).split("\n", 1)
    return parts[1] if len(parts) > 1 else ""
