"""The one real request a local replica answers before it reads Running, decided per runtime
(and, where a runtime serves several tasks, per task): the smallest request of its model's
task. The status says its words while it waits (state.py); the probe sends it
(replica_status.py). Pure: plain values in, plain values out.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import runtimes as rt


def _silence_wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV of silence: the transcription's audio."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()


SILENCE_WAV = _silence_wav()


@dataclass(frozen=True)
class FirstRequest:
    route: str
    words: str  # as a Loading status says it: "has not answered GET /health and <words>"
    fields: Mapping[str, Any]  # the body besides "model"
    audio: bool = False  # a multipart form with SILENCE_WAV as its file, not JSON

    def httpx_arguments(self, model_id: str) -> dict[str, Any]:
        """The body of this request to a server that answers to `model_id`, as httpx takes it."""
        body = {"model": model_id, **self.fields}
        if self.audio:
            return {"data": body, "files": {"file": ("warm-up.wav", SILENCE_WAV, "audio/wav")}}
        return {"json": body}


CHAT = FirstRequest(
    "/v1/chat/completions",
    "a one-token chat",
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
)
COMPLETION = FirstRequest(
    "/v1/completions", "a one-token completion", {"prompt": "Hi", "max_tokens": 1}
)
EMBEDDING = FirstRequest("/v1/embeddings", "an embedding of one word", {"input": ["hello"]})
RERANKING = FirstRequest(
    "/v1/rerank", "a reranking of one document", {"query": "hello", "documents": ["world"]}
)
TRANSCRIPTION = FirstRequest(
    "/v1/audio/transcriptions",
    "a transcription of half a second of silence",
    {"response_format": "json"},
    audio=True,
)
BY_TASK = {
    rt.GENERATE: COMPLETION,
    rt.EMBED: EMBEDDING,
    rt.SCORE: RERANKING,
    rt.TRANSCRIBE: TRANSCRIPTION,
}


def first_request(runtime: str, task: str) -> FirstRequest | None:
    """What a replica of `runtime` serving a model of `task` answers before it reads Running;
    None when the task is unknown (the configured command, whose server is unknown, or a state
    written before tasks were recorded): its readiness path alone then."""
    if runtime == rt.TRANSFORMERS.name:
        # It loads the model on the first request (the first chat after Running took 15 s): a
        # one-token chat, the route its clients take, loads it with its chat template.
        return CHAT
    if runtime == rt.FASTER_WHISPER.name:
        # It loads the model on the first request (a folder with no model reads as ready);
        # transcription is all it serves, whatever an older state recorded.
        return TRANSCRIPTION
    return BY_TASK.get(task)  # vLLM (either build), infinity
