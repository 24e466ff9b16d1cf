"""Real weights: the local backend serves the packaged Whisper tiny.en with the real
faster-whisper-server (which answers json and verbose_json only) and records the runtime; the
gateway answers a spoken WAV (espeak-ng) in OpenAI's text, srt and vtt, built from the
runtime's segments, to the official openai client.

Slow (a real model), so it runs only where scripts/cpu_runtimes.sh installed the runtime, as
tests/jobs/backends/local/test_cpu_runtimes_real.py does.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import openai
import pytest

from jobs.backends.base import Observed
from jobs.backends.local import runtimes as rt
from jobs.backends.local.runner import LocalRunner
from jobs.lifecycle import record_status
from tests.gateway.support import caught_up, live_gateway, make_app, make_key
from tests.helpers import wait_for
from tests.packaged_models import default_models_dir, prepare

RUNTIMES_DIR = rt.configured_runtimes_dir()
MISSING = sorted({"faster-whisper", "transformers"} - rt.installed_runtimes(RUNTIMES_DIR))
pytestmark = [
    pytest.mark.real_models,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"the CPU runtimes {', '.join(MISSING)} are not installed in {RUNTIMES_DIR} "
        f"(transformers' Python prepares the packaged models); run "
        f"{rt.install_command(' '.join(MISSING), RUNTIMES_DIR)} first",
    ),
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None,
        reason="espeak-ng makes the spoken WAV: apt-get install espeak-ng",
    ),
]
READY_TIMEOUT = 300.0
ANSWER_TIMEOUT = 300.0
SRT_SPAN = r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}"
VTT_SPAN = SRT_SPAN.replace(",", r"\.")


@pytest.fixture
def gateway(transactional_db):
    """The gateway with a read timeout a real model on a busy CPU meets (the shared fixture's
    2 s suits the stand-in: a transcription here took longer while CI shared the machine)."""
    live = live_gateway(read_timeout=ANSWER_TIMEOUT)
    yield live
    live.stop()


def test_whisper_answers_text_srt_and_vtt_through_the_gateway(settings, tmp_path, org, gateway):
    models = prepare(runtimes_dir=RUNTIMES_DIR)
    settings.SERVEDECK_LOCAL_COMMAND = ""
    settings.SERVEDECK_RUNTIMES_DIR = RUNTIMES_DIR
    settings.SERVEDECK_MODELS_DIR = default_models_dir().resolve()
    wav = tmp_path / "speech.wav"
    spoken = ["espeak-ng", "-v", "en-us", "-s", "140", "-w", str(wav)]
    subprocess.run([*spoken, "The capital of France is Paris."], check=True)
    manifest = {
        "spec": {
            "name": "whisper",
            "source": {
                "type": "Model",
                "model": {
                    "uri": f"file://{models.transcription}",
                    "format": "vLLM",
                    "runtime": {"engine": "vllm"},
                    "resources": {"cpu": "1", "memory": "1Gi"},
                    "scaling": {"minReplicas": 1},
                },
            },
        }
    }
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    try:
        runner.apply("whisper", manifest, 1)

        def running():
            status = runner.observe("whisper")
            if status.phase == "Failed":
                pytest.fail(f"whisper failed: {status.reason}")
            return status if status.phase == "Running" else None

        status = wait_for(running, "whisper did not reach Running", READY_TIMEOUT, 0.5)
        application = make_app(org, "whisper", "", phase="Pending")
        record_status(application, Observed.of(status))
        assert application.runtime == "faster-whisper"
        _, key = make_key(org)
        caught_up(gateway)
        client = openai.OpenAI(
            base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=ANSWER_TIMEOUT
        )

        def transcribe(fmt: str) -> str:
            with open(wav, "rb") as audio:
                return client.audio.transcriptions.create(
                    model="whisper", file=audio, response_format=fmt
                )

        text = transcribe("text")
        assert text.endswith("\n") and "paris" in text.lower(), text
        srt = transcribe("srt")
        block = rf"1\n{SRT_SPAN}\n[^\n]+\n"
        assert re.match(block, srt), srt
        assert "paris" in srt.lower(), srt
        vtt = transcribe("vtt")
        cue = rf"WEBVTT\n\n{VTT_SPAN}\n[^\n]+\n"
        assert re.match(cue, vtt), vtt
        assert "paris" in vtt.lower(), vtt
        with open(wav, "rb") as audio:
            verbose = client.audio.transcriptions.create(
                model="whisper",
                file=audio,
                response_format="verbose_json",
                timestamp_granularities=["segment"],
            )
        assert verbose.language == "english" and verbose.duration > 1, verbose
        assert verbose.segments and verbose.segments[0].end > verbose.segments[0].start
    finally:
        runner.shutdown()
