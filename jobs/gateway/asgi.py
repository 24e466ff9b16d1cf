"""The gateway as its own ASGI application, for production: several processes behind a load
balancer, sharing limits through Redis (REDIS_URL), each reading keys and routes from the
console's database.

    uvicorn jobs.gateway.asgi:application --loop uvloop --http httptools --workers 4 \\
        --no-access-log --no-proxy-headers

The client's address comes from X-Forwarded-For only when the connection is from a proxy
listed in SERVEDECK_TRUSTED_PROXIES (edge.py), as in the console; uvicorn's own proxy-header
handling is left off.

ASGI lifespan start loads the snapshot and starts the meter; stop flushes the meter.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

from django.conf import settings  # noqa: E402

from jobs.gateway.edge import ClientFromTrustedProxies, ClosesUnreadBody, networks  # noqa: E402
from jobs.gateway.mount import make_gateway  # noqa: E402  (needs Django set up first)

application = ClientFromTrustedProxies(
    ClosesUnreadBody(make_gateway()), networks(settings.SERVEDECK_TRUSTED_PROXIES)
)
