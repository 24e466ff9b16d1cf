"""The model server's own figures the overview shows beside the gateway's: requests waiting and
KV-cache use, read from vLLM's Prometheus /metrics within a bounded time and size.

`parse` is pure (text in, figures out); `fetch` is the one edge: the local backend's server
straight on its loopback port, a Kubernetes application's through the API server's service
proxy to its predictor Service (the Service the gateway routes to, reachable wherever the
console's kubeconfig is). The reconciler calls `observe` for each Running vLLM application (a
few at a time, within a budget per pass: jobs/reconciler/scraping.py) and keeps the latest
figures in the cache, where the overview and its live socket read them (`latest`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import httpx
from django.core.cache import cache

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_SECONDS = 1.0  # each wait: to connect, and for the next piece of the page
# The whole page, however it comes: the timeouts above are per wait, so a server sending a
# byte at a time would otherwise hold a scrape (and the reconciler) for as long as it likes.
SCRAPE_DEADLINE_SECONDS = 2.0
MAX_METRICS_BYTES = 1_000_000  # vLLM's page is tens of kB; a larger one is not a model server's
CACHE_SECONDS = 60  # older figures are not shown: the server stopped answering
VLLM = "vllm"
VLLM_CPU = "vllm-cpu"  # jobs.backends.local.vllm_cpu.NAME: the same /metrics
VLLM_RUNTIMES = (VLLM, VLLM_CPU)  # the recorded runtimes whose server has vLLM's /metrics
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
# vLLM renamed the KV-cache gauge (gpu_cache_usage_perc before the V1 engine); either is read.
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def parse(text: str) -> dict[str, float | None]:
    """Requests waiting and running (summed over the series' labels, e.g. several engines) and
    KV-cache use as a fraction 0..1 (the highest of the series), None where absent."""
    sums: dict[str, float] = {}
    highest: dict[str, float] = {}
    wanted = {WAITING, RUNNING, *KV_CACHE}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name, rest = line[:brace], line[line.rfind("}") + 1 :]
        else:
            name, rest = line[:space], line[space:]
        parts = rest.split()  # the value, then an optional timestamp
        if name not in wanted or not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        sums[name] = sums.get(name, 0.0) + value
        highest[name] = max(highest.get(name, value), value)
    kv = next((highest[name] for name in KV_CACHE if name in highest), None)
    return {
        "requests_waiting": sums.get(WAITING),
        "requests_running": sums.get(RUNNING),
        "kv_cache_usage": None if kv is None else min(max(kv, 0.0), 1.0),
    }


class NoAnswer(Exception):
    """The server's metrics could not be had in time."""


def fetch(
    application,
    timeout: float = SCRAPE_TIMEOUT_SECONDS,
    deadline: float = SCRAPE_DEADLINE_SECONDS,
) -> str:
    """The application's /metrics page, whole within about `deadline` seconds (the last wait
    may take `timeout` more); raises NoAnswer when it cannot be had in time, ValueError for a
    page too large."""
    if not on_kubernetes(application):
        try:
            return _get(application.endpoint, timeout, deadline)
        except httpx.HTTPError as error:
            raise NoAnswer(type(error).__name__) from None
    # Loaded only for Kubernetes applications, as the reconciler loads it.
    from jobs.backends.kubernetes.backend import client_for
    from jobs.backends.kubernetes.errors import BackendError

    try:
        body = client_for(application.profile.cluster).predictor_get(
            application.name,
            application.manifest["spec"]["namespace"],
            "metrics",
            MAX_METRICS_BYTES,
            timeout,
            deadline,
        )
    except BackendError as error:
        raise NoAnswer(error.reason) from None
    return body.decode("utf-8", "replace")


def on_kubernetes(application) -> bool:
    return application.profile.cluster.backend == "kubernetes"


def _get(endpoint: str, timeout: float, deadline: float) -> str:
    until = time.monotonic() + deadline
    url = endpoint.rstrip("/") + "/metrics"
    client = httpx.Client(timeout=httpx.Timeout(timeout), trust_env=False)
    with client, client.stream("GET", url) as response:
        response.raise_for_status()
        body = bytearray()
        for chunk in response.iter_bytes():  # each piece as it comes
            body += chunk
            if len(body) > MAX_METRICS_BYTES:
                raise ValueError(f"{url} answered more than {MAX_METRICS_BYTES} bytes")
            if time.monotonic() > until:
                raise NoAnswer(f"{url} did not send its whole page within {deadline:g} s")
    return body.decode("utf-8", "replace")


def is_vllm(application) -> bool:
    """vLLM serves it: the runtime the backend recorded (vLLM, or vLLM's CPU build on the local
    backend; another CPU runtime is not vLLM, whatever the manifest's engine)."""
    return application.serving_runtime in VLLM_RUNTIMES


def cache_key(application_pk: int) -> str:
    return f"serving-metrics:{application_pk}"


def latest(application_pk: int) -> dict[str, Any] | None:
    return cache.get(cache_key(application_pk))


def scraped(application) -> bool:
    """Whether it has figures to scrape: a Running vLLM server the console can reach."""
    if application.phase != "Running" or not is_vllm(application):
        return False
    return on_kubernetes(application) or bool(application.endpoint)


def observe(application) -> dict[str, Any] | None:
    """Scrape a Running vLLM application's server; keep and return the figures when they
    changed (None when unchanged, not vLLM, or the server did not answer in time)."""
    if not scraped(application):
        return None
    try:
        figures = parse(fetch(application))
    except (NoAnswer, ValueError) as error:
        # The reason may name the cluster's address: for the operator's log, bounded.
        logger.info("no serving metrics from %s: %.200s", application.name, error)
        return None
    if latest(application.pk) == figures:
        cache.touch(cache_key(application.pk), CACHE_SECONDS)
        return None
    cache.set(cache_key(application.pk), figures, CACHE_SECONDS)
    return figures
