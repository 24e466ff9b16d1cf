"""One live console for a module of client tests: Daphne serving the console (REST API and the
gateway at /v1) on a file database, the local backend running the stand-in model server, a
reconciler following it in a thread, and the `servedeck` client run as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import STAND_IN
from tests.helpers import STAND_IN_FLAGS, make_member, make_org
from tests.live_server import console_process


@dataclass
class Live:
    url: str
    home: Path
    admin_token: str
    viewer_token: str
    # ada is an admin of a second organisation too, globex: a token of hers made there.
    other_org_token: str
    # The speech-to-text application on the parakeet stand-in (the gateway translates), made
    # when the reconciler no longer follows: it was never started on this machine.
    make_speech_app: Callable[[], object]

    @contextlib.contextmanager
    def reconciling(self) -> Iterator[None]:
        """The reconciler's local step in a thread, as `manage.py reconcile` beside the
        console, while the block runs. The speech application runs on no process of this
        machine, so the reconciler calls it Pending: it is put back as it was after."""
        from jobs.models import Application

        fields = ("phase", "reason", "next_step", "endpoint", "ready_replicas")
        speech = list(Application.objects.filter(name="speech").values("pk", *fields))
        stop = threading.Event()
        follower = threading.Thread(target=_follow, args=(stop,), daemon=True)
        follower.start()
        try:
            yield
        finally:
            stop.set()
            follower.join(10)
            for row in speech:
                Application.objects.filter(pk=row.pop("pk")).update(**row)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEDECK_")}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / "config"))
        env.update(extra)
        return env

    def run(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = 60,
        program: Sequence[str] = (sys.executable, "-m", "servedeck"),
        **env: str,
    ):
        """`servedeck ARGS` as a user runs it (`program`: another install's, e.g. the fresh
        virtualenv's executable); its exit code, stdout and stderr."""
        return subprocess.run(
            [*program, *args],
            env=self.env(**env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _follow(stop: threading.Event) -> None:
    """The reconciler's local step, as `manage.py reconcile` runs it beside the console."""
    from django.db import connection

    from jobs.reconciler import Reconciler

    reconciler = Reconciler()
    try:
        while not stop.wait(0.2):
            with contextlib.suppress(Exception):  # a busy SQLite file: the next step retries
                reconciler.step_local()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings
    from django.test.utils import setup_databases, teardown_databases

    from accesspolicies.models import Membership, PersonalAccessToken, Role
    from jobs.backends.local.backend import forget_local_runner, local_runners_on_disk
    from tests.gateway.support import StandIn, make_app

    state = tmp_path_factory.mktemp("local-backend")
    overrides = override_settings(
        SERVEDECK_LOCAL_COMMAND=(
            f"{shlex.quote(sys.executable)} {shlex.quote(str(STAND_IN))} --port {{port}} "
            "--served-model-name {name} --startup-delay 0.1 {args}"
        ),
        SERVEDECK_EXTRA_ENGINE_FLAGS=STAND_IN_FLAGS,
        SERVEDECK_LOCAL_STATE_DIR=state,
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    )
    overrides.enable()
    forget_local_runner()
    speech = StandIn("speech", "--runtime", "parakeet")
    own_databases = None
    with django_db_blocker.unblock():
        try:
            default = connections["default"]
            if default.settings_dict["NAME"] != default.creation._get_test_db_name():
                # pytest-django sets up only the databases its `db` tests ask for; these tests
                # reach the database through the live console, so they set up their own.
                own_databases = setup_databases(verbosity=0, interactive=False, aliases={"default"})
            if default.vendor == "sqlite":
                assert not default.is_in_memory_db(), "the live server needs a database file"
            org = make_org("acme")
            users = get_user_model()
            admin = make_member(users, org, "ada", Role.ADMIN)
            viewer = make_member(users, org, "vera", Role.VIEWER)
            _, admin_token = PersonalAccessToken.issue(admin.user, org, "laptop")
            _, viewer_token = PersonalAccessToken.issue(viewer.user, org, "laptop")
            globex = make_org("globex")
            Membership.objects.create(organization=globex, user=admin.user, role=Role.ADMIN)
            _, other_org_token = PersonalAccessToken.issue(admin.user, globex, "laptop")
            with console_process(django_db_blocker) as url:
                home = tmp_path_factory.mktemp("home")
                yield Live(
                    url,
                    home,
                    admin_token,
                    viewer_token,
                    other_org_token,
                    partial(make_app, org, "speech", speech.url, runtime="parakeet"),
                )
        finally:
            speech.stop()
            local_runners_on_disk()  # the servers the console started, from their state folder
            forget_local_runner()
            if own_databases is not None:
                teardown_databases(own_databases, verbosity=0)
            else:
                call_command("flush", "--no-input", verbosity=0)  # the next module starts empty
            overrides.disable()


@dataclass
class Canned:
    """A local HTTP server answering what a test sets for (method, path), and recording each
    request's method, path and headers: a console or gateway that says what no ServeDeck says
    (a redirect, a control character in a document)."""

    url: str
    answers: dict[tuple[str, str], tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body=b"", **headers: str) -> None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        self.answers[(method, path)] = (status, headers, body)


def _canned_handler(canned: Canned):
    class Handler(BaseHTTPRequestHandler):
        def handle_one(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            canned.seen.append((self.command, path, dict(self.headers)))
            status, headers, body = canned.answers.get(
                (self.command, path), (404, {"Content-Type": "text/plain"}, b"not canned")
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = handle_one

        def log_message(self, format, *args):  # noqa: A002 - quiet: pytest shows failures
            pass

    return Handler


@pytest.fixture
def canned() -> Iterator[Callable[[], Canned]]:
    """canned() starts one more such server; all stop with the test."""
    servers = []

    def start() -> Canned:
        server = ThreadingHTTPServer(("127.0.0.1", 0), None)
        made = Canned(f"http://127.0.0.1:{server.server_address[1]}")
        server.RequestHandlerClass = _canned_handler(made)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return made

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


CLIENT = Path(__file__).resolve().parents[2] / "client"


@pytest.fixture(scope="session")
def fresh_install(tmp_path_factory) -> Path:
    """A virtualenv made for the session with only the client package installed (`pip install`
    of a copy of client/, its dependencies from the machine's package index and cache): the
    folder of its `servedeck` executable and its python. Built once, used by every test that
    asks for it."""
    root = tmp_path_factory.mktemp("fresh-install")
    source = root / "client"  # a copy: building never writes into the repository
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    installed = subprocess.run(
        [*pip, str(source)], capture_output=True, text=True, timeout=600, cwd=root
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv / "bin"
