"""Whether the Hub the console talks to answers at all, asked with a short timeout and
remembered for a few minutes, so that a page can say "work offline" without waiting on the
network each time it is shown.

One small read of the endpoint's model search, through huggingface_hub's own HTTP session
(the client Check model uses); any HTTP answer below 500 counts as reachable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
from huggingface_hub.errors import OfflineModeIsEnabled
from huggingface_hub.utils import build_hf_headers, get_session

from models_catalog import hub

TIMEOUT = 2.0  # seconds for the whole read: a page waits at most this long, once per CACHE_SECONDS
CONNECT_TIMEOUT = 1.5
CACHE_SECONDS = 180.0


@dataclass(frozen=True)
class Reach:
    endpoint: str
    reachable: bool
    why: str  # for the page when it is not: "no answer within 2 s", "connection refused", ...


_answers: dict[str, tuple[float, Reach]] = {}
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def clear() -> None:
    """Forget every answer (tests)."""
    with _guard:
        _answers.clear()


def hub_reach(endpoint: str | None = None, clock: Callable[[], float] = time.monotonic) -> Reach:
    """Whether `endpoint` (HF_ENDPOINT as it is now by default) answers; asked at most once
    per CACHE_SECONDS per endpoint, by one request at a time (others wait for its answer)."""
    endpoint = hub.endpoint_now(endpoint)
    with _guard:
        lock = _locks.setdefault(endpoint, threading.Lock())
    with lock:
        kept = _answers.get(endpoint)
        if kept is not None and kept[0] > clock():
            return kept[1]
        reach = _ask(endpoint)
        with _guard:
            _answers[endpoint] = (clock() + CACHE_SECONDS, reach)
        return reach


def _ask(endpoint: str) -> Reach:
    timeout = httpx2.Timeout(TIMEOUT, connect=CONNECT_TIMEOUT)
    try:
        response = get_session().get(
            f"{endpoint}/api/models",
            params={"limit": 1},
            headers=build_hf_headers(token=False, library_name=hub.LIBRARY),
            timeout=timeout,
        )
    except OfflineModeIsEnabled:
        return Reach(endpoint, False, "HF_HUB_OFFLINE is set on the console's host")
    except httpx2.TimeoutException:
        return Reach(endpoint, False, f"no answer within {TIMEOUT:g} s")
    except httpx2.HTTPError as exc:
        return Reach(endpoint, False, _plain(exc))
    if response.status_code >= 500:
        return Reach(endpoint, False, f"it answered HTTP {response.status_code}")
    return Reach(endpoint, True, "")


def _plain(exc: Exception) -> str:
    text = str(exc).lower()
    if "refused" in text:
        return "the connection was refused"
    if "name" in text and ("resolution" in text or "not known" in text or "resolve" in text):
        return "its host name does not resolve"
    return "it could not be reached"
