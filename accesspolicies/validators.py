"""Checks on what people choose: usernames (they appear in URLs, pages and logs) and passwords
(AUTH_PASSWORD_VALIDATORS, wherever one is set)."""

import re

from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError

USERNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,149}")
USERNAME_RULE = (
    "a username is 1 to 150 characters: ASCII letters, digits and . _ @ + -, "
    "starting with a letter or digit"
)


def validate_username(value: str) -> None:
    """Raise ValidationError unless `value` is a username every page, URL and log line can carry
    (no quotes, slashes, spaces or control characters)."""
    if not isinstance(value, str) or not USERNAME_PATTERN.fullmatch(value):
        shown = (
            repr(value[:40]) + ("…" if len(value) > 40 else "") if isinstance(value, str) else ""
        )
        raise ValidationError(f"{shown} is not a valid username: {USERNAME_RULE}.", code="invalid")


def password_problems(password: str, user=None) -> list[str]:
    """What AUTH_PASSWORD_VALIDATORS say against `password` for `user` (empty when it passes);
    the password itself is never in the text."""
    try:
        password_validation.validate_password(password, user)
    except ValidationError as error:
        return list(error.messages)
    return []


def validate_new_user(username: str, password: str | None) -> None:
    """Raise ValidationError unless a user `username` may be created with `password` (None: no
    password yet); every path that creates a user calls this."""
    from django.contrib.auth import get_user_model

    validate_username(username)
    if password is not None:
        problems = password_problems(password, get_user_model()(username=username))
        if problems:
            raise ValidationError(problems, code="password")
