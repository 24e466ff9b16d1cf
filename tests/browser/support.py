"""Helpers for browser tests that are not fixtures."""

from concurrent.futures import ThreadPoolExecutor

from django.db import connections


def off_the_loop(function, *args, **kwargs):
    """Call `function` in a worker thread and return its result.

    Playwright's loop counts as running in the test's thread, so code that bridges to async
    (the channel-layer announcement after a status change, say) refuses to run there. A
    worker thread has no loop; its database connection is closed when it is done.
    """

    def call():
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=60)
