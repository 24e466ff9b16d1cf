"""The reconciler inside the console's process (settings.SERVEDECK_RECONCILER_IN_PROCESS, on by
default without Redis): started once per process by the first ASGI call (any server, daphne
included, which has no lifespan), on a thread of its own; stopped at the process's exit, which
also stops the local model servers it started (they resume when the console starts again)."""

from __future__ import annotations

import atexit
import logging
import os
import threading

from django.conf import settings

from jobs.live.groups import note_server_loop

logger = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 15.0
_lock = threading.Lock()
_running: tuple[int, object, threading.Thread] | None = None  # (pid, reconciler, thread)
_exit_hooked = False


def enabled() -> bool:
    return bool(getattr(settings, "SERVEDECK_RECONCILER_IN_PROCESS", False))


def start_once(interval: float = 2.0) -> bool:
    """Start the reconciler thread unless this process runs one (or the setting is off); call
    from the console's event loop. True when this call started it."""
    global _running, _exit_hooked
    if not enabled():
        return False
    note_server_loop()
    with _lock:
        if _running is not None and _running[0] == os.getpid() and _running[2].is_alive():
            return False
        from jobs.reconciler import Reconciler

        reconciler = Reconciler(interval=interval)
        thread = threading.Thread(target=_run, args=(reconciler,), name="servedeck-reconciler")
        thread.daemon = True  # the exit hook stops it first; a daemon never holds the exit
        _running = (os.getpid(), reconciler, thread)
        thread.start()
        if not _exit_hooked:
            atexit.register(stop)
            _exit_hooked = True
    logger.info("the reconciler runs inside the console's process")
    return True


def _run(reconciler) -> None:
    from django.db import connection

    try:
        reconciler.run()
    finally:
        connection.close()


def stop(timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """Stop this process's reconciler and wait for it (bounded); a no-op when none runs."""
    global _running
    with _lock:
        running, _running = _running, None
    if running is None or running[0] != os.getpid():
        return
    _, reconciler, thread = running
    reconciler.stop()
    thread.join(timeout)
    if thread.is_alive():
        logger.warning("the reconciler did not stop within %.0f s", timeout)


def running() -> bool:
    current = _running
    return current is not None and current[0] == os.getpid() and current[2].is_alive()


class StartsReconciler:
    """ASGI middleware: a call of any kind (a request, a socket, lifespan) starts the in-process
    reconciler when the setting is on and this process runs none yet (a forked server is a
    process of its own); a cheap check once it runs."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if not running() and enabled():
            start_once()
        await self.app(scope, receive, send)
