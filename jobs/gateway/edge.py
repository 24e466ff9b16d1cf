"""What every request meets before the console or the gateway sees it (ASGI middleware, no
Django): its client address, read from X-Forwarded-For only when the connection comes from a
trusted proxy (SERVEDECK_TRUSTED_PROXIES), and a connection that closes when an answer leaves
part of the request's body unread, so that the server reads no more of it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (or single addresses) as networks; ValueError names the entry it cannot read."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{entry[:60]!r} is not an address or a network (CIDR, e.g. 10.0.0.0/8)"
            ) from None
    return tuple(out)


def address_of(text: str) -> Address | None:
    """An address as a proxy writes it (with or without a port, IPv6 in brackets), an
    IPv4-mapped IPv6 one as IPv4; None when it is not one."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_address(peer: str, forwarded_for: list[str], trusted: tuple[Network, ...]) -> str | None:
    """The client's address: the connection's own (`peer`) unless it is a trusted proxy; then
    the rightmost hop of X-Forwarded-For that is not a trusted proxy (what the client wrote to
    the left of it is the client's word, never taken). None when a hop cannot be read."""
    address = address_of(peer)
    if address is None or not _trusted(address, trusted) or not forwarded_for:
        return peer
    hops = [hop for value in forwarded_for for hop in value.split(",")]
    for hop in reversed(hops):
        found = address_of(hop)
        if found is None:
            return None  # a hop no proxy of ours would write: the address is unknown
        address = found
        if not _trusted(address, trusted):
            break
    return str(address)


def _trusted(address: Address, trusted: tuple[Network, ...]) -> bool:
    return any(address in network for network in trusted)


class ClientFromTrustedProxies:
    """Sets the scope's client (HTTP and WebSocket) from X-Forwarded-For when the connection
    comes from a trusted proxy; a scope from anyone else keeps its own, and the header is
    ignored. Without trusted proxies it changes nothing."""

    def __init__(self, app, trusted: tuple[Network, ...]) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope, receive, send) -> None:
        client = scope.get("client")
        if self.trusted and client and scope["type"] in ("http", "websocket"):
            forwarded = [
                value.decode("latin-1")
                for name, value in scope["headers"]
                if name == b"x-forwarded-for"
            ]
            if forwarded:
                address = client_address(client[0], forwarded, self.trusted)
                if address != client[0]:
                    scope = {**scope, "client": (address, 0) if address else None}
        await self.app(scope, receive, send)


def has_body(scope) -> bool:
    """Whether the request announces a body (a Content-Length above 0, or chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


class ClosesUnreadBody:
    """An answer that starts before the request's body was read to its end says
    `Connection: close`, so the server closes the connection after it instead of reading (and
    dropping) the rest of an upload nobody will use."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        read = False

        async def reading():
            nonlocal read
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                read = True
            return message

        async def sending(message):
            if message["type"] == "http.response.start" and not read:
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, reading, sending)
