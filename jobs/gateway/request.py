"""Reading a request: its body (bounded), its `model`, the application it names (by model or
host), the client network check, and asking an upstream stream for usage. Pure apart from
reading the ASGI body; every refusal is a GatewayError in OpenAI's words."""

from __future__ import annotations

import ipaddress
import json

from . import speech
from .errors import GatewayError, bounded
from .snapshot import Grant, Key, Route

_INCLUDE_USAGE = b'{"stream_options":{"include_usage":true},'
_INCLUDE_RUNNING = b'{"stream_options":{"include_usage":true,"continuous_usage_stats":true},'


class ClientGone(Exception):
    """The client closed the connection before the answer was complete."""


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"The request body is larger than {limit // (1024 * 1024)} MiB; send less."
    )


async def read_body(receive, limit: int) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone()
    body = message.get("body", b"")
    if len(body) > limit:  # a server may hand over a whole body in one message
        raise too_large(limit)
    if not message.get("more_body"):
        return body
    chunks = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def not_utf8() -> GatewayError:
    return GatewayError(
        400,
        "The request body is not UTF-8: send the JSON encoded as UTF-8 (RFC 8259), not UTF-16 "
        "or UTF-32.",
    )


def json_model(body: bytes) -> tuple[str | None, dict]:
    # json.loads(bytes) would also read UTF-16 and UTF-32; the gateway's checks of the parsed
    # body must see what the model server sees, so only UTF-8 is read (a NUL byte never
    # appears in UTF-8 JSON, and is how UTF-16/32 without a byte-order mark shows).
    if b"\0" in body:
        raise not_utf8()
    try:
        text = body.decode("utf-8-sig")  # a UTF-8 byte-order mark, as json.loads allowed
    except UnicodeDecodeError:
        raise not_utf8() from None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise GatewayError(400, "The request body is not valid JSON; send a JSON object.") from None
    if not isinstance(obj, dict):
        raise GatewayError(400, "The request body must be a JSON object with a 'model' field.")
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        raise GatewayError(
            400, f"model: {bounded(model, 40)} is not a string; send a model id.", "model"
        )
    return model, obj


def wants_stream(obj: dict) -> bool:
    """The body's `stream`. Only a boolean (or null): a model server reads 1 or "true" as true,
    and a stream taken for a plain answer would go without its tokens metered and limited."""
    stream = obj.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise GatewayError(
            400, f"stream: {bounded(stream, 20)} is not true or false; send a boolean.", "stream"
        )
    return stream is True


def form(body: bytes, content_type: bytes) -> list[speech.Part]:
    kind = content_type.decode("latin-1")
    boundary = speech.boundary_of(kind) if kind.lower().startswith("multipart/form-data") else None
    if boundary is None:
        raise GatewayError(
            400, "Audio requests are multipart/form-data with a 'file' and a 'model'."
        )
    return speech.parse_multipart(body, boundary)


def unknown_model(model: str | None) -> GatewayError:
    return GatewayError(
        404,
        f"The model '{bounded(model, 63)}' does not exist, or this key may not see it; "
        "GET /v1/models lists the models this key may call.",
        "model",
        "model_not_found",
    )


# What a caller is told of a model that is not running, by phase: plain words, never the
# status's own reason (a Failed one quotes the model server's last log lines).
NOT_RUNNING = {
    "Pending": "it is waiting to be scheduled; try again once it runs",
    "Scheduling": "it is waiting to be scheduled; try again once it runs",
    "Downloading": "it is downloading its model; try again in a few minutes",
    "Loading": "its model is loading; try again in a minute",
    "Updating": "a new revision is loading; try again in a minute",
    "Failed": "it failed; a member of its organisation can read why on its page in the console",
    "Stopped": "it was stopped; a deployer of its organisation can start it again",
    "Sleeping": "it is asleep and could not be woken; try again in a moment",
    "Deleting": "it is being deleted",
}


def not_running(route: Route) -> GatewayError:
    plain = NOT_RUNNING.get(route.phase, "it has no address to call yet; try again in a moment")
    return GatewayError(
        503, f"The model '{route.name}' is not running (it is {route.phase}): {plain}.", "model"
    )


def refuse_background(obj: dict) -> None:
    """`background` other than false or null: the gateway would start work whose result it
    does not serve (GET /v1/responses/{id}) and whose usage it cannot meter."""
    if obj.get("background") not in (None, False):
        raise GatewayError(
            400,
            "background: background responses are not served by this gateway (their result "
            "could not be retrieved); send background: false or leave it out, and read the "
            "answer in the same request (stream: true for long ones).",
            "background",
        )


def target(snapshot, key: Key, model: str | None, host_route: Route | None) -> Route:
    if host_route is not None:
        if host_route.organization_id != key.organization_id:
            raise unknown_model(model or host_route.name)
        if model is not None and model != host_route.name:
            adapter = snapshot.routes.get((key.organization_id, model))
            if adapter is not None and adapter.base == host_route.name:
                return adapter  # a LoRA adapter of the model this host serves
            raise GatewayError(
                404,
                f"This host serves the model '{host_route.name}', not '{bounded(model, 63)}'.",
                "model",
                "model_not_found",
            )
        return host_route
    if not model:
        raise GatewayError(
            400, "model: missing; name the model to call (GET /v1/models lists them).", "model"
        )
    target = snapshot.routes.get((key.organization_id, model))
    if target is None:
        raise unknown_model(model)
    return target


# Where a Prometheus scraper of /metrics may call from: loopback and private networks.
SCRAPER_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7")
)


def client_address(scope) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The client's address (an IPv4-mapped IPv6 one as IPv4), or None when unknown."""
    client = scope.get("client")
    try:
        address = ipaddress.ip_address(client[0]) if client else None
    except ValueError:
        return None
    if address is not None and address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:10.1.2.3 from a dual-stack listener
    return address


def from_scraper_network(scope) -> bool:
    address = client_address(scope)
    return address is not None and any(address in network for network in SCRAPER_NETWORKS)


def host_name(value: bytes) -> str:
    """A Host header's name: lowercased, without its port."""
    return value.decode("latin-1").rsplit(":", 1)[0].lower()


def names_application_host(scope, snapshot) -> bool:
    """Whether the request's Host is an application's (`<app>.<domain>`, routed to the
    gateway from the Internet through the cluster's load balancer)."""
    for name, value in scope["headers"]:
        if name == b"host":
            return host_name(value) in snapshot.hosts
    return False


def check_network(grant: Grant, scope, target: Route) -> None:
    address = client_address(scope)
    if address is None or not any(address in network for network in grant.networks):
        raise GatewayError(
            403,
            f"Calls to the model '{target.name}' are not allowed from this network; its access "
            "policy lists the networks that may call it.",
        )


def ask_for_usage(body: bytes, obj: dict, running: bool = False) -> tuple[bool, bool, bytes]:
    """(whether the client asked for usage itself, whether for running usage too, the body
    asking the upstream for usage: at the end, and with `running` on every chunk as vLLM's
    continuous_usage_stats gives it, so a stream cut short is metered with what it sent)."""
    options = obj.get("stream_options")
    if options is None and "stream_options" not in obj:
        prefix = _INCLUDE_RUNNING if running else _INCLUDE_USAGE
        stripped = body.lstrip()
        rest = stripped[1:].lstrip()
        if rest.startswith(b"}"):
            return False, False, prefix[:-1] + b"}"
        return False, False, prefix + rest  # the client's bytes, one field in front
    if options is None:
        # Sent as null: a field put in front would be overridden by the client's own (the
        # upstream reads the last), and the tokens would go unmetered and unlimited.
        options = {}
    if not isinstance(options, dict):
        raise GatewayError(400, "stream_options must be an object.", "stream_options")
    usage = options.get("include_usage") is True
    keeps_running = usage and options.get("continuous_usage_stats") is True
    if usage and (keeps_running or not running):
        return True, keeps_running, body
    wanted = {"include_usage": True, "continuous_usage_stats": True} if running else {}
    obj["stream_options"] = {**options, "include_usage": True, **wanted}
    return usage, keeps_running, json.dumps(obj).encode()
