"""A model that is not running answers 503 with its phase and a plain reason: never the model
server's log lines, which a Failed status quotes for the organisation's members (host paths,
tracebacks, other callers' prompts). The members still read them on the model's page and
through the REST API (finding 7 of issue 21)."""

import httpx
import pytest

from jobs.models import Application
from tests.gateway.support import caught_up, make_app, make_key
from tests.helpers import bearer

LOG_LINES = (
    "Replica 0 (pid 4242) exited with code 1 within 3 s of starting. Its last log lines:\n"
    'File "/home/ops/.venvs/vllm/lib/python3.11/site-packages/vllm/engine.py", line 12\n'
    "Traceback (most recent call last): RuntimeError: CUDA out of memory\n"
    "INFO prompt from another caller: 'the merger closes on Friday'"
)
SECRETS = ("/home/ops", "Traceback", "merger", "pid 4242", "CUDA out of memory")


def chat(gateway, plain, model):
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {plain}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


@pytest.mark.parametrize(
    "phase, said",
    [
        ("Failed", "failed"),
        ("Loading", "loading"),
        ("Downloading", "downloading"),
        ("Stopped", "stopped"),
        ("Pending", "waiting"),
    ],
)
def test_the_503_says_the_phase_and_a_plain_reason_without_log_lines(gateway, org, phase, said):
    app = make_app(org, "broken", "", phase=phase)
    Application.objects.filter(pk=app.pk).update(reason=LOG_LINES)
    _, plain = make_key(org)
    caught_up(gateway)
    answer = chat(gateway, plain, "broken")
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "model" and error["code"] == "model_not_running"
    message = error["message"]
    assert "'broken'" in message and f"it is {phase}" in message and said in message.lower()
    assert not any(secret in message for secret in SECRETS), message
    assert "\n" not in message


def test_members_still_read_the_log_lines(gateway, org, viewer, client):
    app = make_app(org, "broken", "", phase="Failed")
    Application.objects.filter(pk=app.pk).update(reason=LOG_LINES)
    answer = client.get("/api/v1/applications/broken", **bearer(viewer))
    assert answer.status_code == 200
    assert "Traceback (most recent call last)" in answer.json()["status"]["reason"]
