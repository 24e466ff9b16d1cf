"""Low item: a Content-Security-Policy without inline scripts, and no inline handlers, scripts
or styles in any template (they would not run under it, and a name with a quote broke out of
one)."""

import re
from pathlib import Path

import pytest
from django.conf import settings

TEMPLATES = Path(settings.BASE_DIR) / "templates"
# templates/accesspolicies/members.html is being replaced by the invitations work (g-access),
# which moves its Remove confirmation to data-confirm; take it off this list at merge.
NOT_YET = {"accesspolicies/members.html"}

INLINE = [
    (re.compile(r"\son[a-z]+\s*=", re.I), "an inline on…= handler"),
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"\sstyle\s*=", re.I), "a style= attribute"),
    (re.compile(r"<style\b", re.I), "a <style> element"),
    (re.compile(r"javascript:", re.I), "a javascript: URL"),
    (re.compile(r"\shx-on", re.I), "an hx-on handler (evaluated code)"),
    (re.compile(r"hx-trigger=\"[^\"]*\[", re.I), "an hx-trigger filter (evaluated code)"),
    (re.compile(r"hx-(vals|headers)='?\"?js:", re.I), "js: values (evaluated code)"),
]


def templates():
    return sorted(
        str(path.relative_to(TEMPLATES))
        for path in TEMPLATES.rglob("*.html")
        if str(path.relative_to(TEMPLATES)) not in NOT_YET
    )


@pytest.mark.parametrize("name", templates())
def test_no_inline_code_in_templates(name):
    text = (TEMPLATES / name).read_text()
    for pattern, what in INLINE:
        found = pattern.search(text)
        assert not found, f"{name} has {what}: {text[found.start() : found.start() + 80]!r}"


def test_pages_send_the_policy(as_admin, client, db):
    for response in (as_admin.get("/"), client.get("/login/")):
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


def test_htmx_is_told_not_to_inject_styles_or_eval(as_admin):
    page = as_admin.get("/").content.decode()
    assert '"includeIndicatorStyles": false' in page
    assert '"allowEval": false' in page
