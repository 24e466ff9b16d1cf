"""Every answer the gateway itself gives is in OpenAI's error shape, so any OpenAI SDK raises
the matching exception: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json

# status -> (OpenAI's error type, a stable code the client can branch on)
KINDS = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "not_allowed"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "unprocessable"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "upstream_failed"),
    503: ("server_error", "model_not_running"),
    504: ("server_error", "upstream_timeout"),
}


class GatewayError(Exception):
    """An answer the gateway gives instead of the model's: status, message, offending param."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.param, self.code)


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> bytes:
    kind, default_code = KINDS.get(status, KINDS[500])
    payload = {
        "error": {"message": message, "type": kind, "param": param, "code": code or default_code}
    }
    return json.dumps(payload).encode()


def bounded(value: object, limit: int = 80) -> str:
    """A value a client sent, safe to quote in a message: printable and at most `limit` long."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "…"


# The answers every unauthenticated or misrouted request gets, built once.
UNAUTHORIZED = GatewayError(
    401,
    "Invalid or missing API key: send it as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'. "
    "Ask an admin of your organisation for a key under Team.",
)
