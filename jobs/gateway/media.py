"""Media links in a request's body (`image_url`, `audio_url`, `video_url`, `file_url`, wherever
they sit): a runtime fetches them from its own host, which reaches loopback (other model
servers, which take no key) and the cluster's network. By default only `data:` URLs pass; an
operator may allow public http(s) links (SERVEDECK_GATEWAY_MEDIA_URLS=public), whose host must
resolve to public addresses only, every one of them.

vLLM is started following no redirect of a media link (jobs/render/engine.py, the local
command's env), so a link checked here cannot lead inward after; it checks no address itself.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from .errors import GatewayError

DATA_ONLY = "data"
PUBLIC = "public"
MODES = (DATA_ONLY, PUBLIC)
MEDIA_KEYS = frozenset({"image_url", "audio_url", "video_url", "file_url"})
MAX_LINKS = 32  # links resolved for one request
RESOLVE_SECONDS = 5.0
# Lookups run on threads of their own, at most MAX_LOOKUPS at once in the process: a lookup the
# gateway stopped waiting for still holds its thread until the resolver gives up, and must not
# take the event loop's default pool (or pile up) when many links name slow hosts.
MAX_LOOKUPS = 32
LOOKUPS = threading.BoundedSemaphore(MAX_LOOKUPS)
_RESOLVER = ThreadPoolExecutor(MAX_LOOKUPS, thread_name_prefix="gateway-media-dns")
# Ranges `is_global` does not name on every Python: shared address space (RFC 6598) and the
# IPv6 prefixes that carry an IPv4 destination (6to4, NAT64).
BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in ("100.64.0.0/10", "2002::/16", "64:ff9b::/96", "64:ff9b:1::/48")
)
# Characters URL parsers disagree on (a link one reads as public, another as loopback).
_AMBIGUOUS = frozenset("\\ \t\r\n")


def links(obj: object) -> list[tuple[str, str]]:
    """(field path, URL) of every media link in `obj`, in document order."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[object, tuple]] = [(obj, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for name, item in reversed(value.items()):
                if name in MEDIA_KEYS:
                    if isinstance(item, str):
                        found.append((_field((*path, name)), item))
                        continue
                    if isinstance(item, dict) and isinstance(item.get("url"), str):
                        found.append((_field((*path, name, "url")), item["url"]))
                stack.append((item, (*path, name)))
        elif isinstance(value, list):
            for index in range(len(value) - 1, -1, -1):
                stack.append((value[index], (*path, index)))
    found.reverse()
    return found


def _field(path: tuple) -> str:
    """messages[0].content[1].image_url.url; a key the client made up is not quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if part.isidentifier() and len(part) <= 40 else "…"
            out += f".{name}" if out else name
    return out


def is_data(url: str) -> bool:
    return url[:5].lower() == "data:"


def blocked(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a model server must not fetch from `address`: anything not on the public
    Internet (loopback, private, link-local, shared, reserved, multicast, unspecified)."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
        or any(address in network for network in BLOCKED)
    )


async def check(obj: object, mode: str) -> None:
    """Refuse the request when a media link may not be fetched; return when every one may."""
    remote = []
    for field, url in links(obj):
        if is_data(url):
            continue
        if mode != PUBLIC:
            raise GatewayError(
                400,
                f"{field}: only data: URLs are accepted (the media itself, as "
                "data:<type>;base64,<data>); links are not fetched on this gateway. Send the "
                "file inline, or ask the operator to allow public links "
                "(SERVEDECK_GATEWAY_MEDIA_URLS=public).",
                field,
            )
        remote.append((field, _host_port(field, url)))
    if not remote:
        return
    if len(remote) > MAX_LINKS:
        raise GatewayError(
            400,
            f"{remote[MAX_LINKS][0]}: at most {MAX_LINKS} media links in one request; send the "
            "rest inline as data: URLs or in another request.",
            remote[MAX_LINKS][0],
        )
    first: dict[tuple[str, int], str] = {}
    for field, host_port in remote:
        first.setdefault(host_port, field)  # one lookup per host, however often it is linked
    await asyncio.gather(*(_check_host(field, host, port) for (host, port), field in first.items()))


def _host_port(field: str, url: str) -> tuple[str, int]:
    refusal = GatewayError(
        400,
        f"{field}: not a link the model server may fetch; send a data: URL or an http(s) "
        "link to a public host (http://host/path, with no user name or password in it).",
        field,
    )
    if any(c in _AMBIGUOUS or not c.isprintable() for c in url):
        raise refusal
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise refusal from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise refusal
    return parts.hostname, port or (443 if parts.scheme.lower() == "https" else 80)


async def _check_host(field: str, host: str, port: int) -> None:
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        addresses = await _resolve(field, host, port)
    if not addresses or any(blocked(address) for address in addresses):
        raise GatewayError(
            400,
            f"{field}: the link's host is on a loopback, private or link-local network (or "
            "resolves to one), where the model server may not fetch from; send the media as a "
            "data: URL or link to a public host.",
            field,
        )


async def _resolve(field: str, host: str, port: int) -> list:
    if not LOOKUPS.acquire(blocking=False):
        raise GatewayError(
            503,
            f"{field}: the gateway is looking up too many media links' hosts at once; try "
            "again in a few seconds, or send the media as a data: URL.",
            field,
            "media_lookups_busy",
        )
    try:
        lookup = _RESOLVER.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    except BaseException:
        LOOKUPS.release()
        raise
    # Released when the lookup is over (or cancelled before it ran), not when the request
    # stopped waiting for it.
    lookup.add_done_callback(lambda _: LOOKUPS.release())
    try:
        infos = await asyncio.wait_for(asyncio.wrap_future(lookup), RESOLVE_SECONDS)
    except (OSError, TimeoutError, UnicodeError):
        raise GatewayError(
            400,
            f"{field}: the link's host could not be resolved; check the link, or send the media "
            "as a data: URL.",
            field,
        ) from None
    found = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            try:
                found.append(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]))
            except ValueError:
                return []  # an address we cannot read is not one we can vouch for
    return found
