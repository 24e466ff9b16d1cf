"""Whether a live page's listener is still a signed-in member, asked before every send and
answered from the database at most once a second per listener; and telling a user's pages at
once when the user's sessions end.

Every send of a live page checks again that its membership exists and that the session it was
opened with is still signed in (not logged out, the user active, the password the one it was
signed in under). Hundreds of pages under steady traffic would make that a few queries per
send; instead a listener confirmed is trusted for RECHECK_SECONDS, and one removed in this
process (post_delete, also through an organisation's or a user's deletion) is forgotten at
once. A removal or a logout made by another process is seen within RECHECK_SECONDS.

Sooner, through the user's channel-layer group (groups.user_group), whichever process the page
is on: a logout ends the pages of that session ("session.ended"); a change to the user (a new
password, deactivation) has each of the user's pages check its session again
("session.check"). Pages closed so are told 4401: sign in and open the page again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.contrib.auth import get_user_model, user_logged_out
from django.db.models.signals import post_delete, post_save

from accesspolicies.access import signed_in
from accesspolicies.models import Membership
from jobs.live import groups

RECHECK_SECONDS = 1.0
CONFIRMED, SIGNED_OUT, REMOVED = "confirmed", "signed out", "removed"
# The only change to a user that leaves their sessions as they were: a login's timestamp.
HARMLESS_FIELDS = frozenset({"last_login"})


@dataclass(frozen=True)
class Listener:
    """Who a live page listens as: a membership, its user and the session that opened it."""

    membership_pk: int
    user_pk: int
    session_key: str | None


class ConfirmedMembers:
    """Listener -> when the database last confirmed it. Thread-safe: confirmations are made in
    the sockets' database threads, read on the event loop."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[Listener, float] = {}
        self.queries = 0  # how many times the database was asked, for tests and the bench

    def fresh(self, listener: Listener) -> bool:
        """Confirmed within RECHECK_SECONDS: no query needed (safe on the event loop)."""
        with self._lock:
            seen = self._seen.get(listener)
        return seen is not None and self.clock() - seen < RECHECK_SECONDS

    def confirm(self, listener: Listener, recheck: bool = False) -> str:
        """CONFIRMED, or why not (REMOVED, SIGNED_OUT): from the database unless fresh and no
        `recheck` is asked (call it from a thread)."""
        if not recheck and self.fresh(listener):
            return CONFIRMED
        asked = self.clock()
        self.queries += 1
        if not Membership.objects.filter(pk=listener.membership_pk).exists():
            self.forget(listener.membership_pk)
            return REMOVED
        if not signed_in(listener.session_key, listener.user_pk):
            self.forget_session(listener.session_key)
            return SIGNED_OUT
        with self._lock:
            self._seen[listener] = asked
            if len(self._seen) > 10_000:  # listeners not asked about for a while go
                now = self.clock()
                self._seen = {k: t for k, t in self._seen.items() if now - t < RECHECK_SECONDS}
        return CONFIRMED

    def forget(self, membership_pk: int) -> None:
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if k.membership_pk != membership_pk}

    def forget_session(self, session_key: str | None) -> None:
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if k.session_key != session_key}

    def forget_user(self, user_pk: int) -> None:
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if k.user_pk != user_pk}


members = ConfirmedMembers()


def _removed(sender, instance, **kwargs) -> None:
    members.forget(instance.pk)


def _logged_out(sender, request, user, **kwargs) -> None:
    """Sent before the session is flushed: its key is still the one the pages opened with."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if user is None or key is None:
        return
    members.forget_session(key)
    groups.send([(groups.user_group(user.pk), {"type": "session.ended", "session": key})])


def _user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created or (update_fields is not None and set(update_fields) <= HARMLESS_FIELDS):
        return
    members.forget_user(instance.pk)
    groups.send([(groups.user_group(instance.pk), {"type": "session.check"})])


def connect() -> None:
    post_delete.connect(_removed, sender=Membership, dispatch_uid="live-member-removed")
    user_logged_out.connect(_logged_out, dispatch_uid="live-session-logged-out")
    post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="live-user-changed")
