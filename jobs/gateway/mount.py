"""Building the gateway from the settings, and mounting it at /v1 in front of the console's
ASGI application (the embedded default: one process serves pages, websockets and /v1)."""

from __future__ import annotations

from django.conf import settings

from .app import Gateway
from .metering import Meter, process_meter
from .proxy import Timeouts
from .snapshot import SnapshotKeeper


def make_gateway(meter: Meter | None = None) -> Gateway:
    redis_url = getattr(settings, "REDIS_URL", "") or None
    timeouts = Timeouts(
        connect=float(settings.SERVEDECK_GATEWAY_CONNECT_TIMEOUT),
        read=float(settings.SERVEDECK_GATEWAY_READ_TIMEOUT),
    )
    return Gateway(
        meter=meter if meter is not None else process_meter(),
        keeper=SnapshotKeeper(redis_url=redis_url),
        redis_url=redis_url,
        timeouts=timeouts,
        redis_max_connections=settings.SERVEDECK_REDIS_MAX_CONNECTIONS,
        media_urls=settings.SERVEDECK_GATEWAY_MEDIA_URLS,
        wake_wait=float(settings.SERVEDECK_WAKE_WAIT),
    )


class MountGateway:
    """HTTP requests under /v1/ go to the gateway, everything else to the console. Lifespan
    (uvicorn) starts and stops the gateway; without it (daphne) the gateway starts on its first
    request, and the meter it starts flushes when the process exits."""

    def __init__(self, console, gateway: Gateway) -> None:
        self.console = console
        self.gateway = gateway

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http" and (scope["path"].startswith("/v1/") or scope["path"] == "/v1"):
            await self.gateway(scope, receive, send)
        elif kind == "lifespan":
            await self.gateway.lifespan(receive, send)
        else:
            await self.console(scope, receive, send)
