"""Helpers the tests share: the shortest manifest, making organisations and members, waiting."""

import contextlib
import io
import os
import time
from collections.abc import Callable

import pytest
from django.test import Client

from accesspolicies.models import Membership, Organization, PersonalAccessToken
from jobs.models import Cluster, Profile

# The Redis database tests that start their own limiter or gateway use: one per test run, so two
# runs side by side (CI's SQLite and PostgreSQL passes) never flush each other's counters.
TEST_REDIS_URL = f"redis://127.0.0.1:6379/{os.environ.get('SERVEDECK_TEST_REDIS_DB', '12')}"

SHORTEST = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bge-embed
  profileName: local
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""

# The stand-in model server's own test switches (tests/fakes/model_server.py), allowed the way
# an operator allows the flags of a server other than vLLM (SERVEDECK_EXTRA_ENGINE_FLAGS).
STAND_IN_FLAGS = (
    "--startup-delay=float --crash-after=float --fail-on-start=bool --ignore-sigterm=bool "
    "--spawn-worker=bool --stream-delay=float --answer-delay=float --error-rate=float"
)


# The config.json of a two-layer Llama with a 64-wide hidden state: small on any machine.
TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "vocab_size": 100,
    "torch_dtype": "float32",
}


def make_org(slug: str) -> Organization:
    org = Organization.objects.create(slug=slug, name=slug.title())
    cluster = Cluster.objects.create(organization=org, name="local")
    Profile.objects.create(organization=org, name="local", cluster=cluster)
    return org


def make_member(django_user_model, org, username, role) -> Membership:
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    return Membership.objects.create(organization=org, user=user, role=role)


def client_for(membership) -> Client:
    """A logged-in client whose page requests say they were opened for the member's organisation
    (what base.html's htmx header and each form's hidden field send)."""
    client = Client(headers={"X-Page-Organization": membership.organization.slug})
    client.force_login(membership.user)
    return client


def session_cookie(user) -> tuple[bytes, bytes]:
    """The Cookie header of a signed-in session of `user`, for a WebSocket handshake."""
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def bearer(membership) -> dict:
    _, plain = PersonalAccessToken.issue(membership.user, membership.organization, "test")
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def api_error(response) -> dict:
    """The REST API's error envelope of `response`, after checking it has the one shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["status"] == response.status_code and error["message"], error
    assert all({"path", "message", "level"} <= set(p) for p in error["problems"]), error
    return error


def problems(response) -> list[dict]:
    """The problems (path, message, level) an API error lists."""
    return api_error(response)["problems"]


def wait_for(ready: Callable[[], object], failure: str, timeout: float = 5, every: float = 0.05):
    """Poll until `ready()` is truthy and return it; after `timeout` seconds, fail the test."""
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        if time.monotonic() > deadline:
            pytest.fail(failure)
        time.sleep(every)
    return value


def command_line(*args: str) -> tuple[str, str, int]:
    """`manage.py ARGS` as a shell runs it (run_from_argv's steps: its errors printed, not
    raised), in this process and on its database: stdout, stderr and the exit status. Only
    run_from_argv's last step is left out, closing every database connection, which would
    end the test's transaction."""
    from django.core.management import get_commands, load_command_class

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        command = load_command_class(get_commands()[args[0]], args[0])
        command._called_from_command_line = True
        try:
            options = vars(command.create_parser("manage.py", args[0]).parse_args(args[1:]))
            command.execute(*options.pop("args", ()), **options)
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    return out.getvalue(), err.getvalue(), code
