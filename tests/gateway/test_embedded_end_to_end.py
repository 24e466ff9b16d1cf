"""The embedded default, end to end: the console's own ASGI application (Django, Channels and
the gateway at /v1) under Daphne; a model deployed through the REST API on the local backend;
a key made with `manage.py apikey create --json`; the official `openai` client calling through
`/v1`; `manage.py apikey revoke` refusing it; and the usage API showing what was metered."""

import io
import json
import time

import httpx
import openai
import pytest
from django.core.management import call_command

from jobs.models import Application
from jobs.reconciler import Reconciler
from tests.helpers import SHORTEST, bearer

pytestmark = pytest.mark.database_file  # the live server is another process: a database file


def running(name: str, timeout: float = 20.0) -> Application:
    """Follow the application with the reconciler's local step until it is Running."""
    reconciler = Reconciler()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconciler.step_local()
        application = Application.objects.get(name=name)
        if application.phase == "Running":
            return application
        time.sleep(0.1)
    raise AssertionError(f"{name} is {application.phase}, not Running: {application.reason}")


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def usage(live: str, path: str, headers: dict, want_requests: int, timeout: float = 5.0) -> dict:
    """The usage API's answer once the meter's flush shows `want_requests` (it flushes once a
    second), or the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(f"{live}/api/v1/{path}/usage?minutes=5", headers=headers, timeout=5)
        assert response.status_code == 200, response.text
        body = response.json()
        if body["totals"]["requests"] >= want_requests or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_the_console_serves_a_deployed_model_to_the_openai_client(console_server, admin):
    live = console_server
    headers = {"Authorization": bearer(admin)["HTTP_AUTHORIZATION"]}

    # Deployed through the REST API; the live server's local backend starts the stand-in.
    created = httpx.post(
        f"{live}/api/v1/applications",
        headers={**headers, "Content-Type": "application/yaml"},
        content=SHORTEST,
        timeout=30,
    )
    assert created.status_code == 201, created.text
    application = running("bge-embed")
    assert application.endpoint.startswith("http://127.0.0.1:")

    made = json.loads(command("apikey", "create", "e2e-caller", "--json"))
    assert made["name"] == "e2e-caller" and made["key"].startswith("sdk_")
    client = openai.OpenAI(base_url=f"{live}/v1", api_key=made["key"], max_retries=0, timeout=10)

    # A key made a moment ago reaches the gateway within its once-a-second reload.
    deadline = time.monotonic() + 3
    while True:
        try:
            models = client.models.list()
            break
        except openai.AuthenticationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert [m.id for m in models.data] == ["bge-embed"]

    chat = client.chat.completions.create(
        model="bge-embed", messages=[{"role": "user", "content": "Say three words"}]
    )
    assert chat.choices[0].message.content
    assert chat.usage.prompt_tokens > 0 and chat.usage.completion_tokens > 0

    stream = client.chat.completions.create(
        model="bge-embed",
        messages=[{"role": "user", "content": "Say three words"}],
        stream=True,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
    assert len([d for d in deltas if d]) >= 2, "the chunks came one by one, not merged"
    assert all(not c.usage for c in chunks), "the usage chunk the client did not ask for"

    embedded = client.embeddings.create(model="bge-embed", input=["one", "two"])
    assert len(embedded.data) == 2 and len(embedded.data[0].embedding) > 0

    # Revoked on the command line: refused by the console's gateway within about a second.
    command("apikey", "revoke", "e2e-caller")
    deadline = time.monotonic() + 3
    refused = None
    while refused is None:
        try:
            client.models.list()
        except openai.AuthenticationError as error:
            refused = error
        else:
            if time.monotonic() > deadline:  # a wait with a limit, not a timing
                pytest.fail("the revoked key still works after 3 s")
            time.sleep(0.05)
    assert refused.status_code == 401
    assert refused.body["type"] and refused.body["message"]

    # Metered: the four calls above (at least; the polls of models/ count as well), with the
    # tokens of the chats and the embeddings, per application and per key.
    per_app = usage(live, "applications/bge-embed", headers, want_requests=3)
    totals = per_app["totals"]
    assert per_app["name"] == "bge-embed" and len(per_app["rows"]) == 5
    assert totals["requests"] >= 3, totals  # chat, stream, embeddings (models/ has no app)
    assert totals["streams"] >= 1 and totals["promptTokens"] > 0, totals
    assert totals["completionTokens"] > 0 and totals["errors5xx"] == 0, totals

    per_key = usage(live, "keys/e2e-caller", headers, want_requests=4)
    assert per_key["name"] == "e2e-caller"
    assert per_key["totals"]["requests"] >= 4, per_key["totals"]  # models/ once, at least
    assert per_key["totals"]["promptTokens"] == totals["promptTokens"], per_key["totals"]
