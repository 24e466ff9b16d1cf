"""A secret a POST made (a token, a key, an invitation or password link), handed to the next page
through the session and shown there once: a reload after the redirect shows it no more."""

SHOWN_ONCE = "shown_once"  # session key: a secret made by the last POST, shown on the next page


def flash_secret(request, title: str, secret: str) -> None:
    request.session[SHOWN_ONCE] = {"title": title, "secret": secret}


def take_secret(request) -> dict | None:
    """The secret the last POST made, removed from the session as it is shown."""
    return request.session.pop(SHOWN_ONCE, None)
