"""Whether a live page's listener is still a member, asked before every send and answered from
the database at most once a second per membership.

Every send of a live page checks its membership again, so a member removed stops getting
updates. Hundreds of pages under steady traffic would make that a query per send; instead a
membership found is trusted for RECHECK_SECONDS, and one removed in this process (post_delete,
also through an organisation's or a user's deletion) is forgotten at once. A removal made by
another process is seen within RECHECK_SECONDS."""

from __future__ import annotations

import threading
import time

from django.db.models.signals import post_delete

from accesspolicies.models import Membership

RECHECK_SECONDS = 1.0


class ConfirmedMembers:
    """Membership pk -> when the database last said it exists. Thread-safe: confirmations are
    made in the sockets' database threads, read on the event loop."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}
        self.queries = 0  # how many times the database was asked, for tests and the bench

    def fresh(self, pk: int) -> bool:
        """Confirmed within RECHECK_SECONDS: no query needed (safe on the event loop)."""
        with self._lock:
            seen = self._seen.get(pk)
        return seen is not None and self.clock() - seen < RECHECK_SECONDS

    def confirm(self, pk: int) -> bool:
        """Still a member? From the database unless fresh (call it from a thread)."""
        if self.fresh(pk):
            return True
        asked = self.clock()
        self.queries += 1
        if not Membership.objects.filter(pk=pk).exists():
            self.forget(pk)
            return False
        with self._lock:
            self._seen[pk] = asked
            if len(self._seen) > 10_000:  # memberships not asked about for a while go
                now = self.clock()
                self._seen = {k: t for k, t in self._seen.items() if now - t < RECHECK_SECONDS}
        return True

    def forget(self, pk: int) -> None:
        with self._lock:
            self._seen.pop(pk, None)


members = ConfirmedMembers()


def _removed(sender, instance, **kwargs) -> None:
    members.forget(instance.pk)


def connect() -> None:
    post_delete.connect(_removed, sender=Membership, dispatch_uid="live-member-removed")
