"""The one place that knows how each model server differs from vLLM's OpenAI surface, keyed by
the runtime the backend recorded for the application (Route.runtime): which public routes it
answers, which of them the gateway translates (infinity.py, speech.py) and which pass through
unchanged (streams included). Pure: a request's parsed body in, the upstream call and the way
back out.

    plan = dialects.plan(route.runtime, "/v1/rerank", body, route.name)
    # None: send the client's bytes unchanged; else POST plan.body to plan.path and give the
    # client plan.finish(answer) (or dialects.refused(status, answer, ...) for a 4xx)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import infinity, speech
from .errors import GatewayError, bounded

CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
EMBEDDINGS, SCORE, RERANK = "/v1/embeddings", "/v1/score", "/v1/rerank"
TRANSCRIPTIONS, TRANSLATIONS = "/v1/audio/transcriptions", "/v1/audio/translations"
_JSON = b"application/json"


@dataclass(frozen=True)
class Dialect:
    label: str  # the server's name, as messages say it
    answers: tuple[str, ...]  # the public routes it serves
    translated: frozenset[str]  # of those, the ones the gateway translates


# Runtimes not listed (vLLM, and a command of the operator's) speak vLLM's surface: every route
# passes through and the model server says what it does not serve.
DIALECTS = {
    # transformers serve: chat, completions and the Responses API as vLLM has them.
    "transformers": Dialect("transformers serve", (CHAT, COMPLETIONS, RESPONSES), frozenset()),
    "infinity": Dialect(
        infinity.RUNTIME, (EMBEDDINGS, RERANK, SCORE), frozenset({EMBEDDINGS, RERANK, SCORE})
    ),
    "faster-whisper": Dialect(
        speech.WHISPER_SERVER,
        (TRANSCRIPTIONS, TRANSLATIONS),
        frozenset({TRANSCRIPTIONS, TRANSLATIONS}),
    ),
    "parakeet": Dialect(
        "the parakeet runtime",
        (TRANSCRIPTIONS, TRANSLATIONS),  # translations: refused with the fix (speech.py)
        frozenset({TRANSCRIPTIONS, TRANSLATIONS}),
    ),
}


@dataclass(frozen=True)
class Plan:
    """One translated upstream request and how its 200 answer becomes the client's."""

    path: str
    body: bytes
    content_type: str
    finish: Callable[[bytes], tuple[bytes, bytes]]  # answer -> (content type, body)
    label: str


def plan(runtime: str, path: str, payload: Any, model: str) -> Plan | None:
    """What to send for a request to `path` (its parsed JSON body, or its multipart parts) of
    an application served by `runtime` as `model`; None when it passes through unchanged.
    A 404 for a route the runtime does not answer, a 400 for what it cannot honour."""
    dialect = DIALECTS.get(runtime)
    if dialect is None:
        return None
    if path not in dialect.answers:
        raise GatewayError(
            404,
            f"The model '{model}' is served by {dialect.label}, which does not answer {path}; "
            f"it answers {', '.join(dialect.answers)}.",
            "model",
            "route_not_served",
        )
    if path not in dialect.translated:
        return None
    if runtime == "infinity":
        call = {EMBEDDINGS: infinity.embeddings, RERANK: infinity.rerank, SCORE: infinity.score}[
            path
        ](payload, model)
        return Plan(
            call.path,
            call.body,
            "application/json",
            lambda data: (_JSON, infinity.finish(call, data)),
            dialect.label,
        )
    translation = path == TRANSLATIONS
    if runtime == "faster-whisper":
        parts, wanted = speech.for_whisper_server(payload, model, translation)
        build, upstream_path = speech.from_whisper_server, path
    else:
        parts, wanted = speech.for_parakeet(payload, translation)
        build, upstream_path = speech.from_parakeet, TRANSCRIPTIONS
    body, content_type = speech.build_multipart(parts)

    def finish(data: bytes) -> tuple[bytes, bytes]:
        try:
            answer = json.loads(data)
        except (ValueError, RecursionError):
            raise GatewayError(
                502, f"{dialect.label} answered with no JSON.", code="upstream_failed"
            ) from None
        return build(answer, wanted)

    return Plan(upstream_path, body, content_type, finish, dialect.label)


def _message(answer: Any) -> str | None:
    """The message of an error answer in OpenAI's shape or FastAPI's ({"detail": ...})."""
    if not isinstance(answer, dict):
        return None
    error = answer.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    detail = answer.get("detail")
    if isinstance(detail, dict):
        return _message(detail)
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        where = ".".join(str(p) for p in detail[0].get("loc", ())[1:] if p is not None)
        said = str(detail[0].get("msg") or "")
        return f"{where}: {said}" if where else said
    return None


def refused(status: int, data: bytes, label: str) -> GatewayError:
    """A translated runtime's 4xx answer in OpenAI's error shape, with its own words."""
    try:
        said = _message(json.loads(data))
    except (ValueError, RecursionError):
        said = None
    why = f": {bounded(said, 300)}" if said else ""
    return GatewayError(status, f"{label} refused the request (status {status}){why}")
