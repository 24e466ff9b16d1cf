"""What the probes ask: `/healthz` (the process answers) and `/readyz` (it can serve: the
database answers, and Redis too where REDIS_URL is set). Answered by HealthCheckMiddleware
before host checks and the HTTPS redirect: kubelets probe pod addresses over plain HTTP."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)

REDIS_TIMEOUT_SECONDS = 2.0


def database_problem() -> str:
    """'' when the default database answers a query, else what is wrong, in a few words."""
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any driver's failure: the probe says not ready
        logger.warning("readiness: the database does not answer: %s", error)
        return f"the database does not answer ({type(error).__name__})"
    return ""


def redis_problem() -> str:
    """'' when Redis is not used or answers PING, else what is wrong."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return ""
    client = redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except Exception as error:  # refused, timed out, wrong password: not ready
        logger.warning("readiness: Redis does not answer: %s", error)
        return f"Redis does not answer ({type(error).__name__})"
    finally:
        client.close()
    return ""


def readiness_problems() -> list[str]:
    return [problem for problem in (database_problem(), redis_problem()) if problem]
