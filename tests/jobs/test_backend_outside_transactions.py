"""Backend I/O (process starts, cluster calls) never runs inside a database transaction: the
revision is committed, then the backend called, then the outcome recorded. Each verb's backend
call is watched: while it runs, this thread holds no transaction and another connection can
update the application's row (a held row lock, or SQLite's write lock, would refuse it)."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from jobs import deploy as verbs
from jobs.backends.local.backend import local_runner
from jobs.models import Application
from jobs.reconciler import Reconciler
from tests.helpers import SHORTEST

VERBS = ("apply", "restart", "stop", "start", "delete", "observe")


def another_connection_updates(name: str) -> str:
    """Update the row from another thread (so another database connection); "" when it
    could, else what refused it."""
    outcome: list[str] = []

    def update() -> None:
        try:
            Application.objects.filter(name=name).update(reason="touched by another connection")
            outcome.append("")
        except Exception as exc:  # noqa: BLE001 - the refusal is the finding
            outcome.append(f"{type(exc).__name__}: {exc}")
        finally:
            close_old_connections()
            connection.close()

    thread = threading.Thread(target=update)
    thread.start()
    thread.join(timeout=30)
    return outcome[0] if outcome else "the update did not finish"


@pytest.fixture
def watched(monkeypatch, transactional_db):
    """What each of the runner's verbs found while it ran: (verb, in a transaction, refusal)."""
    runner = local_runner("acme")
    seen: list[tuple[str, bool, str]] = []
    for verb in VERBS:
        original = getattr(runner, verb)

        def watching(app_name, *args, _verb=verb, _original=original, **kwargs):
            seen.append((_verb, connection.in_atomic_block, another_connection_updates(app_name)))
            return _original(app_name, *args, **kwargs)

        monkeypatch.setattr(runner, verb, watching)
    return seen


def assert_outside(seen, verb):
    calls = [entry for entry in seen if entry[0] == verb]
    assert calls, f"{verb} did not reach the backend: {seen}"
    for _, in_transaction, refusal in calls:
        assert not in_transaction, f"{verb} ran inside a transaction"
        assert refusal == "", f"while {verb} ran, another connection could not update: {refusal}"


def test_apply_and_rollback_call_the_backend_outside_a_transaction(watched, deployer):
    application = verbs.apply(SHORTEST, deployer).application
    assert_outside(watched, "apply")
    verbs.apply(SHORTEST + "      serving:\n        maxConcurrentRequests: 4\n", deployer)
    watched.clear()
    verbs.rollback(application, 1, deployer)
    assert_outside(watched, "apply")


@pytest.mark.parametrize("verb", ["restart", "stop", "start", "delete"])
def test_lifecycle_verbs_call_the_backend_outside_a_transaction(watched, deployer, verb):
    application = verbs.apply(SHORTEST, deployer).application
    getattr(verbs, verb)(application, deployer)
    assert_outside(watched, verb)


def test_the_reconciler_observes_outside_a_transaction(watched, deployer):
    verbs.apply(SHORTEST, deployer)
    Reconciler().step_local()
    assert_outside(watched, "observe")
