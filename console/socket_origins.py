"""Which pages may open the console's live sockets: those of the console's own origin (the
scheme, host and port the handshake was addressed to, its host one of ALLOWED_HOSTS) and of
CSRF_TRUSTED_ORIGINS, the rule Django's CSRF check applies to a form's POST. A page on another
port of an allowed host, or on http for an https console, is refused at the handshake (Channels'
AllowedHostsOriginValidator compared the host alone)."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}  # an Origin leaves its scheme's default port out


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin1")
    return None


def _secure(scope) -> bool:
    """The page was served over https: a wss handshake, or one a trusted proxy says came over
    https (SECURE_PROXY_SSL_HEADER, as Django reads it for a request)."""
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy:
        return False
    name, secure_value = proxy
    sent = _header(scope, name.removeprefix("HTTP_").replace("_", "-").lower().encode())
    return sent is not None and sent.split(",", 1)[0].strip() == secure_value


def _allowed_hosts() -> list[str]:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return allowed


def _normal(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the scheme's default port filled in; None if unreadable."""
    try:
        parsed = urlsplit(f"{scheme}://{netloc}")
        port = parsed.port
    except ValueError:
        return None
    if not parsed.hostname or scheme not in DEFAULT_PORTS:
        return None
    return scheme, parsed.hostname, port if port is not None else DEFAULT_PORTS[scheme]


def own_origin(scope) -> tuple[str, str, int] | None:
    """The origin the handshake was addressed to, from its Host header (else the server's
    address); None when there is neither, or its host is not one of ALLOWED_HOSTS."""
    host = _header(scope, b"host")
    if host is None and scope.get("server"):
        address, port = scope["server"][:2]
        host = f"[{address}]:{port}" if ":" in str(address) else f"{address}:{port}"
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    return _normal("https" if _secure(scope) else "http", host)


def origin_allowed(scope) -> bool:
    """Whether the page that opens this socket (its Origin header) may."""
    origin = _header(scope, b"origin")
    if not origin:
        return False
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    mine = own_origin(scope)
    if mine is not None and _normal(parsed.scheme, parsed.netloc) == mine:
        return True
    # Behind a proxy that does not pass the browser's Host on: the operator names the console's
    # public origins, as Django's CSRF check needs them for every form.
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in (t for t in trusted if "*" not in t):
        return True
    return any(
        parsed.scheme == pattern.scheme and is_same_domain(parsed.netloc, pattern.netloc[1:])
        for pattern in (urlsplit(t) for t in trusted if "*" in t)
    )


class OwnOriginValidator:
    """ASGI middleware: a WebSocket handshake from a page origin_allowed refuses is closed
    before the application sees it (a browser gets no close code, only the failed handshake)."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
