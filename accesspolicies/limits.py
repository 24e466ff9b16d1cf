"""The bounds of what an admin may set on keys and policies, and their one validator."""

import re

from accesspolicies.problems import Invalid, show

NAME_RE = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
NAME_ACCEPTS = (
    "1 to 63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
)
# field -> (largest value accepted, what it counts)
LIMITS = {
    "requestsPerMinute": (1_000_000, "requests per minute"),
    "tokensPerMinute": (1_000_000_000, "tokens per minute"),
    "concurrentRequests": (10_000, "concurrent requests"),
}
MAX_APPLICATIONS = 100
MAX_EXPIRES_IN_DAYS = 3650
MAX_GRACE_MINUTES = 7 * 24 * 60


def name(field: str, value: object, noun: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not NAME_RE.fullmatch(text):
        raise Invalid(
            field,
            f"{show(value)} is not a {noun} name; accepts {NAME_ACCEPTS}, e.g. support-bot. "
            "Choose a name like that.",
        )
    return text


def bounded_int(field: str, value: object, low: int, high: int, what: str) -> int | None:
    """None stays None (no limit); anything else must be a whole number in low..high."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            raise Invalid(
                field, f"{show(value)} is not a whole number; accepts {low} to {high} {what}."
            ) from None
    if not low <= value <= high:
        raise Invalid(
            field,
            f"{value} is out of range; accepts {low} to {high} {what}. Leave it empty for no "
            "limit.",
        )
    return value


def caller_limits(rpm: object, tpm: object, concurrency: object) -> dict[str, int | None]:
    """The three per-caller limits, each None (no limit) or within its bound; keyed by the
    model field they fill."""
    values = {}
    for (field, (high, what)), value, model_field in zip(
        LIMITS.items(),
        (rpm, tpm, concurrency),
        ("requests_per_minute", "tokens_per_minute", "concurrent_requests"),
        strict=True,
    ):
        values[model_field] = bounded_int(field, value, 1, high, what)
    return values
