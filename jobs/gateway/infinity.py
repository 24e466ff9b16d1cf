"""OpenAI's embeddings and vLLM's /v1/rerank and /v1/score on the client's side, infinity-emb
0.0.78's routes on the model's (pure: dicts in, bytes out).

What infinity-emb speaks (started with --url-prefix /v1):
    POST /v1/embeddings {"model", "input": text or texts, "encoding_format": float|base64,
        "dimensions": n (0 = all; it cuts the vector to n without normalising it again),
        "modality": text|image|audio (image and audio inputs are URLs it fetches)}
      -> OpenAI's list of embeddings, usage {prompt_tokens, total_tokens}.
    POST /v1/rerank {"model", "query", "documents": texts, "return_documents": false,
        "raw_scores": false, "top_n": n > 0 or null}   (Cohere's shape)
      -> {"object": "rerank", "results": [{"relevance_score", "index", "document": text or
         null}] best first, "model", "usage": {prompt_tokens, total_tokens}, "id", "created"}
    No /v1/score. Its errors are OpenAI's shape, its validation errors FastAPI's {"detail"}.

What clients get, as vLLM answers (vllm/entrypoints/pooling/score/protocol.py):
    /v1/rerank {"id", "model", "usage": {prompt_tokens, total_tokens}, "results": [{"index",
        "document": {"text", "multi_modal": null}, "relevance_score"}] best first, cut to
        top_n (0: all)}
    /v1/score  {"id", "object": "list", "created", "model", "data": [{"index", "object":
        "score", "score"}] in the order of text_2, "usage": {prompt_tokens, total_tokens,
        completion_tokens: 0, prompt_tokens_details: null}}
Documents come back as the client sent them (infinity strips their whitespace).
"""

from __future__ import annotations

import base64
import json
import math
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .errors import GatewayError, bounded

RUNTIME = "infinity-emb"
MAX_ITEMS = 2048  # infinity's INFINITY_MAX_CLIENT_BATCH_SIZE default
ENCODINGS = ("float", "base64")
# vLLM's names for the two sides of /v1/score, newest first; text_1/text_2 are the oldest.
SCORE_FIELDS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"))
SCORE_FIELDS += (("text_1", "text_2"),)


@dataclass(frozen=True, slots=True)
class Call:
    """One request to infinity, and what its answer is turned into (`finish`)."""

    path: str
    body: bytes
    kind: str  # "embeddings", "rerank" or "score"
    model: str
    texts: tuple[str, ...] = ()  # rerank: the documents as the client sent them
    top_n: int = 0
    dimensions: int | None = None
    encoding: str = "float"

    @property
    def passes_through(self) -> bool:
        """infinity's answer is already what the client gets (embeddings, no dimensions)."""
        return self.kind == "embeddings" and self.dimensions is None


def _refuse(field: str, message: str) -> GatewayError:
    return GatewayError(400, f"{field}: {message}", field)


def _texts(value: Any, field: str, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) > MAX_ITEMS:
            raise _refuse(field, f"{len(value)} {what}s; send at most {MAX_ITEMS} per request.")
        return value
    if isinstance(value, list) and value and all(isinstance(v, int | list) for v in value):
        raise _refuse(
            field,
            f"token ids are not accepted: {RUNTIME}, which serves this model, takes text only; "
            "send strings.",
        )
    if isinstance(value, list) and not value:
        raise _refuse(field, f"empty; send at least one {what}.")
    raise _refuse(
        field,
        f"{bounded(value, 40)} is not a {what} or a list of them; send text ({RUNTIME}, which "
        "serves this model, takes text only).",
    )


def _whole(value: Any, field: str, least: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _refuse(
            field, f"{bounded(value, 20)} is not a whole number of {least} or more; send one."
        )
    return value


def embeddings(obj: dict[str, Any], model: str) -> Call:
    """infinity's /v1/embeddings request for an OpenAI one: text only, float or base64, and
    `dimensions` asked as floats so the gateway normalises the cut vectors as OpenAI does."""
    texts = _texts(obj.get("input"), "input", "text")
    encoding = obj.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise _refuse(
            "encoding_format",
            f"{bounded(encoding, 20)!r} is not one of float, base64; send one of them.",
        )
    dimensions = _whole(obj.get("dimensions"), "dimensions", 1)
    body: dict[str, Any] = {"model": model, "input": texts, "encoding_format": encoding}
    if dimensions is not None:
        body.update(encoding_format="float", dimensions=dimensions)
    user = obj.get("user")
    if isinstance(user, str):
        body["user"] = user
    # Nothing else goes on: `modality` would have infinity fetch image or audio URLs.
    return Call(
        "/v1/embeddings",
        json.dumps(body).encode(),
        "embeddings",
        model,
        dimensions=dimensions,
        encoding=encoding,
    )


def _raw_scores(obj: dict[str, Any]) -> bool:
    """vLLM's use_activation (and its older names softmax, activation): false asks for the
    scores before the sigmoid, which infinity calls raw_scores."""
    for name in ("use_activation", "activation", "softmax"):
        value = obj.get(name)
        if value is not None:
            if not isinstance(value, bool):
                raise _refuse(name, f"{bounded(value, 20)} is not true or false; send a boolean.")
            return not value
    return False


def _rerank_body(model: str, query: str, documents: list[str], raw: bool, top_n: int) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "query": query,
        "documents": documents,
        "return_documents": False,  # the gateway has them, unstripped
        "raw_scores": raw,
    }
    if top_n > 0:
        body["top_n"] = top_n
    return json.dumps(body).encode()


def rerank(obj: dict[str, Any], model: str) -> Call:
    """infinity's /v1/rerank request for a vLLM one (`query`, `documents`, `top_n`)."""
    query = obj.get("query")
    if not isinstance(query, str):
        raise _refuse("query", f"{bounded(query, 40)} is not text; send the query as a string.")
    documents = _texts(obj.get("documents"), "documents", "document")
    top_n = _whole(obj.get("top_n"), "top_n", 0) or 0
    body = _rerank_body(model, query, documents, _raw_scores(obj), top_n)
    return Call("/v1/rerank", body, "rerank", model, tuple(documents), top_n)


def score(obj: dict[str, Any], model: str) -> Call:
    """infinity's /v1/rerank request for a vLLM /v1/score one: one text scored against each of
    the others (infinity has no /v1/score)."""
    for left_name, right_name in SCORE_FIELDS:
        if left_name in obj and right_name in obj:
            break
    else:
        raise _refuse(
            "text_1",
            "missing; send text_1 (one text) and text_2 (a text or a list), or queries and "
            "documents.",
        )
    left = _texts(obj[left_name], left_name, "text")
    right = _texts(obj[right_name], right_name, "text")
    if len(set(left)) > 1:
        raise _refuse(
            left_name,
            f"{len(left)} different texts; {RUNTIME}, which serves this model, scores one text "
            f"against each of {right_name}: send one {left_name}, or one request per text.",
        )
    body = _rerank_body(model, left[0], right, _raw_scores(obj), 0)
    return Call("/v1/rerank", body, "score", model, tuple(right))


# --- answers -----------------------------------------------------------------------------------


def _broken(what: str) -> GatewayError:
    return GatewayError(502, f"{RUNTIME} answered {what}.", code="upstream_failed")


def _usage(answer: dict[str, Any]) -> tuple[int, int]:
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    prompt = usage.get("prompt_tokens")
    total = usage.get("total_tokens")
    prompt = prompt if type(prompt) is int else 0
    return prompt, total if type(total) is int else prompt


def _results(answer: Any, count: int) -> list[tuple[int, float]]:
    """(index, score) of each result of a rerank answer, checked against the documents sent."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise _broken("a rerank without results")
    out = []
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        value = item.get("relevance_score") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count:
            raise _broken("a result for a document it was not sent")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _broken("a result without a relevance score")
        out.append((index, float(value)))
    return out


def _normalised(vector: Any) -> list[float]:
    if not isinstance(vector, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    ):
        raise _broken("an embedding that is not a list of numbers")
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def finish(call: Call, data: bytes) -> bytes:
    """The body the client gets for infinity's 200 answer `data` to `call`."""
    if call.passes_through:
        return data
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError):
        raise _broken("with no JSON") from None
    if not isinstance(answer, dict):
        raise _broken("with JSON that is not an object")
    prompt, total = _usage(answer)
    if call.kind == "embeddings":
        items = answer.get("data")
        if not isinstance(items, list):
            raise _broken("embeddings without data")
        data_out = []
        for position, item in enumerate(items):
            vector = _normalised(item.get("embedding") if isinstance(item, dict) else None)
            embedding: Any = vector
            if call.encoding == "base64":
                packed = struct.pack(f"<{len(vector)}f", *vector)
                embedding = base64.b64encode(packed).decode()
            data_out.append({"object": "embedding", "index": position, "embedding": embedding})
        out = {
            "id": f"embd-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": call.model,
            "data": data_out,
            "usage": {"prompt_tokens": prompt, "total_tokens": total},
        }
        return json.dumps(out).encode()
    results = _results(answer, len(call.texts))
    if call.kind == "score":
        scores = dict(results)
        if len(scores) != len(call.texts):
            raise _broken("fewer scores than texts it was sent")
        out = {
            "id": f"score-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": call.model,
            "data": [
                {"index": i, "object": "score", "score": scores[i]} for i in range(len(call.texts))
            ],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": total,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        }
        return json.dumps(out).encode()
    ranked = sorted(results, key=lambda r: -r[1])  # stable: ties keep infinity's order
    if 0 < call.top_n < len(ranked):
        ranked = ranked[: call.top_n]
    out = {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": call.model,
        "usage": {"prompt_tokens": prompt, "total_tokens": total},
        "results": [
            {
                "index": index,
                "document": {"text": call.texts[index], "multi_modal": None},
                "relevance_score": value,
            }
            for index, value in ranked
        ],
    }
    return json.dumps(out).encode()
