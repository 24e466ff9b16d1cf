"""ASGI entry point: HTTP (Django), WebSockets (Channels) and the gateway at /v1 from one
process (daphne by default; uvicorn works too and runs the gateway's lifespan), and on the
embedded defaults the reconciler too."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402
from console.socket_origins import OwnOriginValidator  # noqa: E402
from jobs.gateway.mount import MountGateway, make_gateway  # noqa: E402
from jobs.reconciler.in_process import StartsReconciler  # noqa: E402

console_application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Only the console's own pages (scheme, host and port) may open a live socket.
        "websocket": OwnOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
gateway = make_gateway()
# On the embedded defaults the reconciler runs in this process (jobs/reconciler/in_process.py).
application = StartsReconciler(MountGateway(console_application, gateway))
