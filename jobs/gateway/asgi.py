"""The gateway as its own ASGI application, for production: several processes behind a load
balancer, sharing limits through Redis (REDIS_URL), each reading keys and routes from the
console's database.

    uvicorn jobs.gateway.asgi:application --loop uvloop --http httptools --workers 4 \\
        --no-access-log --proxy-headers --forwarded-allow-ips <load balancer address>

ASGI lifespan start loads the snapshot and starts the meter; stop flushes the meter.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

from jobs.gateway.mount import make_gateway  # noqa: E402  (needs Django set up first)

application = make_gateway()
