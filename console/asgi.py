"""ASGI entry point: HTTP (Django), WebSockets (Channels) and the gateway at /v1 from one
process (uvicorn through `python -m console.serve`; daphne under `runserver`), and on the
embedded defaults the reconciler too.

Every request meets the edge first (jobs/gateway/edge.py): its client address from trusted
proxies only, and a connection that closes when an answer leaves its body unread. A request to
Django has its body bounded too (BoundedBody): Django reads a whole body before any view runs.
"""

import json
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from console.api_errors import API_PREFIX, error_body  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402
from console.socket_origins import OwnOriginValidator  # noqa: E402
from jobs.gateway.edge import ClientFromTrustedProxies, ClosesUnreadBody, networks  # noqa: E402
from jobs.gateway.mount import MountGateway, make_gateway  # noqa: E402
from jobs.reconciler.in_process import StartsReconciler  # noqa: E402

# The most of a request body the console's own routes take: a manifest is a few kilobytes,
# a form at most Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) plus a 256 KiB recipe file.
MAX_CONSOLE_BODY = 4 * 1024 * 1024
TOO_LARGE = (
    "The request body is larger than {mib} MiB, more than the console takes; send a smaller "
    "one (a manifest is a few kilobytes)."
)


class BoundedBody:
    """Django's requests with their body bounded: a Content-Length over `limit` is answered
    413 before a byte of the body is read; a body without one (chunked) is cut off, and
    answered 413, once it passes `limit`. Django is then told the client went away."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for n, v in scope["headers"] if n == b"content-length"), b"")
        if declared.strip().isdigit() and int(declared) > self.limit:
            await self.refuse(scope, send)
            return
        received, refused = 0, False

        async def bounded():
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    await self.refuse(scope, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message):
            if not refused:  # after the 413 nothing else is sent
                await send(message)

        await self.app(scope, bounded, guarded)

    async def refuse(self, scope, send) -> None:
        message = TOO_LARGE.format(mib=self.limit // (1024 * 1024))
        if scope["path"].startswith(API_PREFIX):
            body, kind = json.dumps(error_body(413, message)).encode(), b"application/json"
        else:
            body, kind = message.encode(), b"text/plain; charset=utf-8"
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),  # the rest of the body is not read
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


console_application = ProtocolTypeRouter(
    {
        "http": BoundedBody(django_asgi_app, MAX_CONSOLE_BODY),
        # Only the console's own pages (scheme, host and port) may open a live socket.
        "websocket": OwnOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
gateway = make_gateway()
# On the embedded defaults the reconciler runs in this process (jobs/reconciler/in_process.py).
application = StartsReconciler(
    ClientFromTrustedProxies(
        ClosesUnreadBody(MountGateway(console_application, gateway)),
        networks(settings.SERVEDECK_TRUSTED_PROXIES),
    )
)
