"""The username rule every path that creates a user applies (a quote broke out of a page's
handler, a slash made a page 500)."""

import pytest
from django.core.exceptions import ValidationError

from accesspolicies.validators import validate_new_user, validate_username


@pytest.mark.parametrize(
    "name", ["ada", "a", "dan.ops", "x@example.com", "b+c", "u_1-2", "A" * 150]
)
def test_good_usernames(name):
    validate_username(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "o'brien",
        'a"b',
        "a/b",
        "a b",
        "a\nb",
        "<script>",
        "-dash",
        ".dot",
        "é",
        "A" * 151,
        "a\\b",
    ],
)
def test_bad_usernames_are_refused_with_the_rule(name):
    with pytest.raises(ValidationError) as refused:
        validate_username(name)
    message = refused.value.messages[0]
    assert "letters, digits and . _ @ + -" in message
    assert len(message) < 250  # a long name is cut, never echoed whole


def test_a_new_users_password_meets_the_validators(db):
    with pytest.raises(ValidationError, match="too short"):
        validate_new_user("dan", "1")
    validate_new_user("dan", "a long enough passphrase")
