"""The live console the browser, client and end-to-end gateway tests talk to: Daphne serving the
console's ASGI application (HTTP, WebSockets, the gateway at /v1 and static files) in a
forked process, started one way for all of them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial


@contextlib.contextmanager
def console_process(django_db_blocker) -> Iterator[str]:
    """Fork Daphne serving the console and yield its base URL (http://127.0.0.1:PORT); stop it
    after. Started when called, so it runs with the settings the caller has in place then (the
    test's own, autouse fixtures included). It reads the test database: rows reach it once
    committed, and SQLite must be a file (a forked process cannot see an in-memory database;
    the `database_file` and `browser` markers give it one)."""
    from channels.testing.live import make_application
    from daphne.testing import DaphneProcess
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.db import connections

    with django_db_blocker.unblock():
        default = connections["default"]
        if default.vendor == "sqlite":
            assert not default.is_in_memory_db(), "the live server needs a SQLite database file"
        connections.close_all()  # never share a database handle across fork
        server = DaphneProcess(
            host="127.0.0.1",
            get_application=partial(make_application, static_wrapper=ASGIStaticFilesHandler),
        )
        server.start()
    try:
        if not server.ready.wait(timeout=30):
            error = "" if server.errors.empty() else server.errors.get(False)[1]
            raise RuntimeError(f"Daphne did not start: {error}")
        yield f"http://127.0.0.1:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)
        if server.is_alive():  # seen once in CI: stopped serving, never exited (SIGTERM handled)
            server.kill()  # never leave it for multiprocessing's exit to wait on
            server.join(10)
