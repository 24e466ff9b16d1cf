"""Each CPU runtime, started with the command line runtimes.py builds, serves a real packaged
model to the official openai client: a chat answer, embeddings that rank, a transcription.

No gateway yet (issue 12 wires the runtimes into the local backend): this proves the argv,
environment, readiness path and route prefix the local backend will use. Slow (a real model
per runtime), so it runs only where scripts/cpu_runtimes.sh has installed the runtimes.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from jobs.backends.local import processes
from jobs.backends.local import runtimes as rt
from jobs.backends.local.command import server_environment
from tests.helpers import wait_for
from tests.packaged_models import PackagedModels, prepare

RUNTIMES_DIR = rt.configured_runtimes_dir()
MISSING = sorted(set(rt.CPU_RUNTIMES) - rt.installed_runtimes(RUNTIMES_DIR))
pytestmark = [
    pytest.mark.real_models,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"the CPU runtimes {', '.join(MISSING)} are not installed in {RUNTIMES_DIR}; "
        f"run {rt.install_command(' '.join(MISSING), RUNTIMES_DIR)} first",
    ),
]
# A loaded 2-core machine runs the 135M model at well under a token a second.
ANSWER_TIMEOUT = 600.0
READY_TIMEOUT = 300.0
SPOKEN = "The capital of France is Paris."


@pytest.fixture(scope="module")
def models() -> PackagedModels:
    return prepare(runtimes_dir=RUNTIMES_DIR)


@contextlib.contextmanager
def serving(runtime: str, model: Path, name: str, tmp_path: Path) -> Iterator[rt.Launch]:
    """The runtime serving `model` on a free loopback port until the block ends."""
    port = processes.free_port()
    launch = rt.cpu_launch(
        runtime, model=str(model), name=name, port=port, runtimes_dir=RUNTIMES_DIR
    )
    # The environment the local backend gives a replica, with a Hugging Face home of its own.
    env = server_environment(os.environ, {**launch.env, "HF_HOME": str(tmp_path / "hf-home")})
    log = tmp_path / f"{runtime}.log"
    with open(log, "w") as out:
        child = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if child.poll() is not None:
            tail = "\n".join(log.read_text().splitlines()[-20:])
            pytest.fail(f"{runtime} exited with {child.returncode} before it was ready:\n{tail}")
        try:
            return httpx.get(base + launch.readiness_path, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(
            ready, f"{runtime} was not ready on {base}{launch.readiness_path}", READY_TIMEOUT, 0.2
        )
        yield launch
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def client(launch: rt.Launch) -> OpenAI:
    port = launch.argv[launch.argv.index("--port") + 1]
    return OpenAI(
        base_url=f"http://127.0.0.1:{port}{launch.route_prefix}",
        api_key="unused",
        timeout=ANSWER_TIMEOUT,
        max_retries=0,
    )


def test_transformers_serve_answers_and_streams(models, tmp_path):
    with serving("transformers", models.chat, "chat", tmp_path) as launch:
        openai = client(launch)
        assert [m.id for m in openai.models.list().data] == [launch.model_id]
        answer = openai.chat.completions.create(
            model=launch.model_id,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
        )
        assert "Paris" in answer.choices[0].message.content
        assert answer.usage.completion_tokens > 0
        stream = openai.chat.completions.create(
            model=launch.model_id,
            messages=[{"role": "user", "content": "Count from one to five."}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
        pieces = [
            c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
        ]
        assert len(pieces) > 1, pieces  # token by token, not one block at the end


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_infinity_embeddings_rank_by_meaning(models, tmp_path):
    with serving("infinity", models.embedding, "minilm", tmp_path) as launch:
        openai = client(launch)
        assert launch.model_id == "minilm"
        food, bread, plane = openai.embeddings.create(
            model=launch.model_id,
            input=["A man is eating food.", "A man is eating bread.", "A plane is taking off."],
        ).data
        assert len(food.embedding) == 384
        assert _cosine(food.embedding, bread.embedding) > _cosine(food.embedding, plane.embedding)


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng makes the spoken WAV: apt-get install espeak-ng",
)
def test_faster_whisper_transcribes_speech(models, tmp_path):
    wav = tmp_path / "speech.wav"
    subprocess.run(
        [
            "espeak-ng",
            "-v",
            "en-us",
            "-s",
            "140",
            "-w",
            str(wav),
            "The capital of France is Paris.",
        ],
        check=True,
    )
    with serving("faster-whisper", models.transcription, "whisper", tmp_path) as launch:
        openai = client(launch)
        with open(wav, "rb") as audio:
            text = openai.audio.transcriptions.create(model=launch.model_id, file=audio).text
        assert "paris" in text.lower(), text


def test_the_chat_model_is_converted_once(models):
    before = (models.chat / "model.safetensors").stat()
    again = prepare(runtimes_dir=RUNTIMES_DIR, log=lambda line: pytest.fail(f"did work: {line}"))
    after = (again.chat / "model.safetensors").stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
