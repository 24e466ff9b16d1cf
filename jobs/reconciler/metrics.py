"""The reconciler's own Prometheus page (`manage.py reconcile --metrics-port`): whether this
replica leads, and every application's phase and how long its status has stood, read from the
database at each scrape, to scrapers on loopback and private networks only (it names every
organisation's applications), as the gateway's /metrics. `/healthz` on the same port answers
the liveness probe from anywhere.

    servedeck_reconciler_leader 1
    servedeck_applications{phase="Running"} 3
    servedeck_application_status_age_seconds{organization="acme",application="llama",
                                             phase="Failed"} 42
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import connection
from django.utils import timezone

from jobs.gateway.request import from_scraper_network
from jobs.models import Application, Phase

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A connection that sends nothing is closed after READ_SECONDS, and at most MAX_CONNECTIONS are
# served at once (each is a thread): past it a connection is answered 503 and closed, so idle or
# slow clients cannot pile up threads in the reconciler's process.
READ_SECONDS = 5.0
MAX_CONNECTIONS = 16
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
    b"Connection: close\r\n\r\nbusy\n"
)


def _value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(reconciler) -> bytes:
    """The page: the leader gauge and transitions, then the applications' figures."""
    leader = reconciler.leader
    lines = [
        "# HELP servedeck_reconciler_leader 1 while this reconciler acts (leads, or runs alone).",
        "# TYPE servedeck_reconciler_leader gauge",
        f"servedeck_reconciler_leader {1 if reconciler.acting() else 0}",
        "# HELP servedeck_reconciler_leader_transitions_total Times this replica became leader.",
        "# TYPE servedeck_reconciler_leader_transitions_total counter",
        f"servedeck_reconciler_leader_transitions_total {leader.transitions if leader else 0}",
    ]
    rows = list(
        Application.objects.values_list("organization__slug", "name", "phase", "updated_at")
    )
    now = timezone.now()
    phases = Counter(phase for _, _, phase, _ in rows)
    lines += [
        "# HELP servedeck_applications Applications by phase.",
        "# TYPE servedeck_applications gauge",
    ]
    lines += [f'servedeck_applications{{phase="{p}"}} {phases.get(p, 0)}' for p in Phase.values]
    lines += [
        "# HELP servedeck_application_status_age_seconds Seconds since the application's "
        "status last changed, by its phase.",
        "# TYPE servedeck_application_status_age_seconds gauge",
    ]
    for organization, name, phase, updated_at in sorted(rows):
        age = max(0.0, (now - updated_at).total_seconds())
        labels = (
            f'organization="{_value(organization)}",application="{_value(name)}",'
            f'phase="{_value(phase)}"'
        )
        lines.append(f"servedeck_application_status_age_seconds{{{labels}}} {age:.0f}")
    return ("\n".join(lines) + "\n").encode()


class _Handler(BaseHTTPRequestHandler):
    server_version = "servedeck-reconciler"
    timeout = READ_SECONDS  # on the socket: a read that waits longer ends the connection

    def log_message(self, format, *args):  # scrapes every few seconds would flood the log
        pass

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
            return
        if self.path != "/metrics":
            self._send(404, b"not found\n", "text/plain")
            return
        if not from_scraper_network({"client": self.client_address}):
            self._send(403, b"only to scrapers on private networks\n", "text/plain")
            return
        try:
            body = render(self.server.reconciler)  # type: ignore[attr-defined]
        except Exception:  # the database may be restarting: say so, keep serving
            logger.exception("reconciler metrics failed")
            self._send(503, b"the database cannot be read\n", "text/plain")
            return
        finally:
            connection.close()  # each scrape is a thread of its own: no connection left open
        self._send(200, body, CONTENT_TYPE)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    """A thread per connection, MAX_CONNECTIONS of them at most."""

    def __init__(self, address, handler, slots: int) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(slots)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()  # no thread was started to release it
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(reconciler, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:  # noqa: S104
    """Serve /metrics and /healthz on a daemon thread; `shutdown()` the answer to stop."""
    server = _Server((host, port), _Handler, MAX_CONNECTIONS)
    server.daemon_threads = True
    server.reconciler = reconciler  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="reconciler-metrics", daemon=True).start()
    return server
