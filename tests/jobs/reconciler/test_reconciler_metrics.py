"""The reconciler's Prometheus page (`manage.py reconcile --metrics-port`): whether this
replica leads, applications by phase and how long each status has stood; /healthz beside it.
Parsed with prometheus_client's own parser, as Prometheus reads it."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import Application
from jobs.reconciler import Reconciler, metrics
from tests.helpers import wait_for


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


class Elector:
    """What the page asks of a leader elector."""

    def __init__(self, leading: bool) -> None:
        self.transitions = 3
        self._leading = leading

    def leading(self) -> bool:
        return self._leading


def app(org, name: str, phase: str, minutes: int) -> Application:
    return Application.objects.create(
        organization=org,
        name=name,
        profile=org.profiles.get(name="local"),
        phase=phase,
        manifest={"spec": {"namespace": "default"}},
        updated_at=timezone.now() - timedelta(minutes=minutes),
    )


def test_the_page_says_phases_ages_and_that_a_lone_reconciler_acts(org, db):
    app(org, "llama", "Failed", 10)
    app(org, "embed", "Running", 1)
    page = samples(metrics.render(Reconciler()))
    assert page[("servedeck_reconciler_leader", ())] == 1
    assert page[("servedeck_reconciler_leader_transitions_total", ())] == 0
    assert page[("servedeck_applications", (("phase", "Failed"),))] == 1
    assert page[("servedeck_applications", (("phase", "Pending"),))] == 0
    age = page[
        (
            "servedeck_application_status_age_seconds",
            (("application", "llama"), ("organization", "acme"), ("phase", "Failed")),
        )
    ]
    assert 599 <= age <= 660


@pytest.mark.parametrize("leading", [True, False])
def test_a_replica_says_whether_it_leads(db, leading):
    page = samples(metrics.render(Reconciler(leader=Elector(leading))))
    assert page[("servedeck_reconciler_leader", ())] == (1 if leading else 0)
    assert page[("servedeck_reconciler_leader_transitions_total", ())] == 3


def test_label_values_are_escaped(org, db):
    org.slug = 'a"b\\c'
    org.save()
    app(org, "llama", "Running", 0)
    page = samples(metrics.render(Reconciler()))
    assert any(dict(labels).get("organization") == 'a"b\\c' for _, labels in page)


def test_the_server_answers_metrics_healthz_and_nothing_else(transactional_db):
    server = metrics.serve(Reconciler(), 0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.read() == b"ok\n"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"] == metrics.CONTENT_TYPE
            assert samples(answer.read())[("servedeck_reconciler_leader", ())] == 1
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/", timeout=5)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_is_only_for_scrapers_on_private_networks(transactional_db, monkeypatch):
    monkeypatch.setattr(metrics, "from_scraper_network", lambda scope: False)
    server = metrics.serve(Reconciler(), 0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/metrics", timeout=5)
        assert refused.value.code == 403
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.status == 200  # the probe says nothing of the applications
    finally:
        server.shutdown()
        server.server_close()


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.1)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_an_idle_connection_is_closed_by_the_server(transactional_db, monkeypatch):
    """A client that connects and sends nothing does not keep a thread of the reconciler's."""
    assert metrics._Handler.timeout == 5
    monkeypatch.setattr(metrics._Handler, "timeout", 0.3)
    server = metrics.serve(Reconciler(), 0, host="127.0.0.1")
    try:
        with socket.create_connection(server.server_address, timeout=5) as idle:
            wait_for(lambda: closed_by_server(idle), "the idle connection was left open", 10)
    finally:
        server.shutdown()
        server.server_close()


def test_connections_past_the_cap_are_answered_busy(transactional_db, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 1)
    server = metrics.serve(Reconciler(), 0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with socket.create_connection(server.server_address, timeout=5):
            wait_for(lambda: not server.slots._value, "the first connection took no slot")
            with pytest.raises(urllib.error.HTTPError) as busy:
                urllib.request.urlopen(f"{base}/healthz", timeout=5)
            assert busy.value.code == 503
        # Once the first is gone, its slot serves again.
        wait_for(lambda: server.slots._value, "the slot was not given back", 10)
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.read() == b"ok\n"
    finally:
        server.shutdown()
        server.server_close()
