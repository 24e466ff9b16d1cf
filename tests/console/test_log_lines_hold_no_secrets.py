"""Issue 21, finding 10: an invitation link carries its secret in its path, and Django's request
log writes the path of every refused request: opening a used invitation again (410) wrote
"Gone: /access/join/sdi_<the whole secret>/" to the console's log. The console's log lines
(written through settings.LOGGING's handler and formatter, as in production) keep only the
secret's prefix, whatever the line. (The access log: test_access_log_path_tokens.py.)"""

import io
import logging

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils.module_loading import import_string

from accesspolicies import members
from accesspolicies.models import Role


@pytest.fixture
def console_log():
    """What the console's own log handler (settings.LOGGING "console") writes, during the test."""
    formatter = import_string(settings.LOGGING["formatters"]["plain"]["()"])
    handlers = [h for h in logging.getLogger().handlers if isinstance(h.formatter, formatter)]
    assert handlers, "the console's log handler is not configured"
    stream = io.StringIO()
    before = [handler.setStream(stream) for handler in handlers]
    yield stream
    for handler, old in zip(handlers, before, strict=True):
        handler.setStream(old)


def test_a_refused_invitation_leaves_no_secret_in_the_log(admin, console_log, django_user_model):
    _, token = members.invite(admin.organization, Role.VIEWER, actor=admin)
    link = reverse("accesspolicies:join", args=[token])
    joiner = Client()
    joiner.force_login(django_user_model.objects.create_user("jo", password="pw-jo-long"))
    assert joiner.post(link).status_code == 302  # used once
    again = Client().get(link)
    assert again.status_code == 410
    written = console_log.getvalue()
    assert "Gone: /access/join/sdi_…/" in written  # the refusal is still logged, as a line
    assert token not in written and token[4:] not in written and token[-20:] not in written


@pytest.mark.parametrize("kind", ["sdk_", "sdp_", "sdi_"])
def test_any_secret_of_the_console_in_any_line_keeps_only_its_prefix(console_log, kind):
    secret = kind + "0123456789ab" + "S3cr3t-Value_" * 3
    logging.getLogger("servedeck.test").warning("could not read %r from /x/%s?y=1", secret, secret)
    written = console_log.getvalue()
    assert secret[4:] not in written
    assert f"could not read '{kind}…' from /x/{kind}…?y=1" in written


def test_a_password_links_token_is_hidden_too(console_log):
    logging.getLogger("servedeck.test").warning(
        "Not Found: /password/set/MQ/1-cz3k2l-0123456789abcdef0123/ then "
        "/password/set/MQ/set-password/"
    )
    written = console_log.getvalue()
    assert "cz3k2l" not in written and "0123456789abcdef" not in written
    assert "/password/set/MQ/…/ then /password/set/MQ/set-password/" in written
