"""How a backend's status text reads on a page: its first line as the reason, the lines after
it (a failed server's last log lines) as lines, and ISO timestamps as local date and time."""

from __future__ import annotations

import re
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()

ISO_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})"
)


def _readable(iso: str) -> str:
    """`iso` as a <time> in the console's time zone; the text as it is when it is no time."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return conditional_escape(iso)
    local = timezone.localtime(moment)
    shown = f"{date_format(local, 'j M Y, H:i:s')} {local:%Z}".strip()  # 1 Dec 2026, 12:28:27 UTC
    return format_html('<time datetime="{}">{}</time>', iso, shown)


@register.filter
def readable_times(text: object) -> SafeString:
    """The text escaped, each ISO 8601 timestamp in it shown as local date and time."""
    text = "" if text is None else str(text)
    out, last = [], 0
    for found in ISO_TIME.finditer(text):
        out.append(conditional_escape(text[last : found.start()]))
        out.append(_readable(found.group()))
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
