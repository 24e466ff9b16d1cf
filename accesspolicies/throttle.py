"""Failed logins counted per account and per client address in Django's cache (Redis in
production, so every console process shares the counts); past a limit, logins wait."""

import hashlib
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache


@dataclass(frozen=True)
class Lockout:
    """Logins are refused for `scope` ('account' or 'address') for `retry_after` seconds."""

    scope: str
    retry_after: int

    def message(self) -> str:
        minutes = max(1, math.ceil(self.retry_after / 60))
        wait = f"{minutes} minute{'s' if minutes != 1 else ''}"
        if self.scope == "account":
            return (
                f"Too many failed logins for this account: try again in {wait}, or ask an "
                "admin of your organisation for a password reset link."
            )
        return f"Too many failed logins from your address: try again in {wait}."


def _keys(scope: str, value: str) -> tuple[str, str]:
    # Usernames are hashed: a key never carries what someone typed.
    digest = hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:32]
    base = f"login-failures:{scope}:{digest}"
    return base, base + ":since"


def _limits() -> dict[str, int]:
    return {
        "account": settings.SERVEDECK_LOGIN_FAILURES_PER_ACCOUNT,
        "address": settings.SERVEDECK_LOGIN_FAILURES_PER_ADDRESS,
    }


def _subjects(username: str, address: str) -> dict[str, str]:
    return {"account": username.casefold(), "address": address or "unknown"}


def lockout(username: str, address: str) -> Lockout | None:
    """The lockout that applies to a login as `username` from `address`, if any."""
    window = settings.SERVEDECK_LOGIN_FAILURE_WINDOW
    limits = _limits()
    for scope, subject in _subjects(username, address).items():
        count_key, since_key = _keys(scope, subject)
        if (cache.get(count_key) or 0) < limits[scope]:
            continue
        since = cache.get(since_key) or time.time()
        return Lockout(scope, max(1, math.ceil(since + window - time.time())))
    return None


def failed(username: str, address: str) -> None:
    """Count one failed login for the account and the address, for one window."""
    window = settings.SERVEDECK_LOGIN_FAILURE_WINDOW
    for scope, subject in _subjects(username, address).items():
        count_key, since_key = _keys(scope, subject)
        cache.add(since_key, time.time(), timeout=window)
        cache.add(count_key, 0, timeout=window)
        try:
            cache.incr(count_key)
        except ValueError:  # expired between add and incr
            cache.set(count_key, 1, timeout=window)


def succeeded(username: str) -> None:
    """A right password clears the account's count (the address's stays: one right password
    from an address does not pardon its guesses at other accounts)."""
    cache.delete_many(_keys("account", username.casefold()))
