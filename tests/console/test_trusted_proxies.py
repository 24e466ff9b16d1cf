"""The client's address comes from X-Forwarded-For only through the proxies the operator
listed (SERVEDECK_TRUSTED_PROXIES), as the rightmost hop that is not one of them; from anyone
else the header is ignored (finding 6 of issue 21: the leftmost address, which the client
writes, passed a policy's allowedNetworks, the per-address login limit and the audit). Tested
on the console as scripts/run.sh starts it; the server's own proxy-header flag is refused."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from django.conf import settings

from accesspolicies.models import AccessPolicy, AuditEntry
from jobs.gateway.edge import client_address, networks
from tests.console.console_process import ConsoleProcess, free_port
from tests.gateway.support import StandIn, make_app, make_key
from tests.helpers import bearer

pytestmark = pytest.mark.database_file  # the console is another process: a database file

INSIDE = "203.0.113.9"  # the only network the policy allows
OUTSIDE = "198.51.100.7"


@pytest.fixture(scope="module")
def stand_in():
    server = StandIn("alpha")
    yield server
    server.stop()


@pytest.fixture
def world(transactional_db, org, admin, stand_in):
    AccessPolicy.objects.create(
        organization=org, name="office", all_keys=True, allowed_networks=[INSIDE + "/32"]
    )
    make_app(org, "alpha", stand_in.url, access={"accessPolicy": "office"})
    _, plain = make_key(org)
    return plain


def chat(console, plain, forwarded_for=None):
    headers = {"Authorization": f"Bearer {plain}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return httpx.post(
        console.url + "/v1/chat/completions",
        headers=headers,
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
        trust_env=False,
    )


def test_behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client(world, tmp_path):
    console = ConsoleProcess(tmp_path, SERVEDECK_TRUSTED_PROXIES="127.0.0.0/8,10.0.0.0/8")
    try:
        assert chat(console, world, INSIDE).status_code == 200
        assert chat(console, world, f"{OUTSIDE}, {INSIDE}, 10.1.2.3").status_code == 200
        # What the client wrote left of the proxy's own hop is never taken.
        refused = chat(console, world, f"{INSIDE}, {OUTSIDE}")
        assert refused.status_code == 403, refused.text
        assert "network" in refused.json()["error"]["message"]
        assert chat(console, world).status_code == 403  # no header: the proxy itself
        assert chat(console, world, "not-an-address").status_code == 403
    finally:
        console.stop()


def test_without_trusted_proxies_the_header_is_ignored(world, tmp_path):
    console = ConsoleProcess(tmp_path)
    try:
        assert chat(console, world, INSIDE).status_code == 403
    finally:
        console.stop()


def login(console, username: str, forwarded_for: str) -> str:
    with httpx.Client(base_url=console.url, trust_env=False, timeout=30) as client:
        page = client.get("/login/")
        token = page.text.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
        answer = client.post(
            "/login/",
            data={"username": username, "password": "wrong", "csrfmiddlewaretoken": token},
            headers={"X-Forwarded-For": forwarded_for, "Referer": console.url + "/login/"},
        )
        return answer.text


def test_the_login_limit_counts_the_forwarded_client(world, tmp_path):
    console = ConsoleProcess(
        tmp_path,
        SERVEDECK_TRUSTED_PROXIES="127.0.0.1",
        SERVEDECK_LOGIN_FAILURES_PER_ADDRESS="2",
    )
    try:
        for name in ("one", "two"):
            assert "Too many failed logins" not in login(console, name, OUTSIDE)
        assert "Too many failed logins from your address" in login(console, "three", OUTSIDE)
        # Another client behind the same proxy is not held back by the first one's guesses.
        assert "Too many failed logins" not in login(console, "four", INSIDE)
    finally:
        console.stop()


def test_the_audit_records_the_forwarded_client(world, admin, tmp_path):
    console = ConsoleProcess(tmp_path, SERVEDECK_TRUSTED_PROXIES="127.0.0.1")
    try:
        made = httpx.post(
            console.url + "/api/v1/keys",
            headers={
                "Authorization": bearer(admin)["HTTP_AUTHORIZATION"],
                "X-Forwarded-For": f"{INSIDE}, {OUTSIDE}",
            },
            json={"name": "audited"},
            timeout=30,
            trust_env=False,
        )
        assert made.status_code in (200, 201), made.text
    finally:
        console.stop()
    entry = AuditEntry.objects.get(action="apikey.create")
    assert entry.address == OUTSIDE


def test_the_servers_own_proxy_header_flag_is_refused_with_what_to_set():
    done = subprocess.run(
        [sys.executable, "-m", "console.serve", "--proxy-headers", "-p", str(free_port())],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "SERVEDECK_TRUSTED_PROXIES" in done.stderr


@pytest.mark.parametrize(
    "peer, header, want",
    [
        ("198.51.100.7", ["203.0.113.9"], "198.51.100.7"),  # not a proxy: header ignored
        ("127.0.0.1", ["203.0.113.9"], "203.0.113.9"),
        ("127.0.0.1", ["203.0.113.9, 10.0.0.2"], "203.0.113.9"),
        ("127.0.0.1", ["1.1.1.1, 203.0.113.9"], "203.0.113.9"),
        ("127.0.0.1", ["1.1.1.1", "203.0.113.9:4711"], "203.0.113.9"),
        ("127.0.0.1", ["[2001:db8::5]:80"], "2001:db8::5"),
        ("127.0.0.1", ["10.0.0.3, 10.0.0.2"], "10.0.0.3"),  # every hop trusted: the farthest
        ("127.0.0.1", ["unknown, 10.0.0.2"], None),
        ("127.0.0.1", [], "127.0.0.1"),
    ],
)
def test_the_rule(peer, header, want):
    assert client_address(peer, header, networks(["127.0.0.1", "10.0.0.0/8"])) == want
