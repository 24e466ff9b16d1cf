"""A request's prompt, for metering a stream whose runtime never said its prompt tokens (an
answer cut short before any usage): the body vLLM's /tokenize counts it from, and, where the
runtime has no tokenizer route, an estimate from its text. Pure."""

from __future__ import annotations

import json
import math
from typing import Any

# OpenAI's rule of thumb for English text: about four bytes of UTF-8 per token.
BYTES_PER_TOKEN = 4
CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def messages(path: str, obj: dict) -> list[dict] | None:
    """The request as chat messages of text ({"role", "content"}), None when it has none: chat's
    own messages, the Responses API's instructions and input items."""
    if path == CHAT:
        found = obj.get("messages")
        if not isinstance(found, list):
            return None
        return [
            {"role": m.get("role") or "user", "content": _text(m.get("content"))}
            for m in found
            if isinstance(m, dict) and isinstance(m.get("role", "user"), str)
        ]
    if path != RESPONSES:
        return None
    out = []
    if isinstance(obj.get("instructions"), str):
        out.append({"role": "system", "content": obj["instructions"]})
    given = obj.get("input")
    if isinstance(given, str):
        out.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if isinstance(item, dict) and isinstance(item.get("role"), str):
                out.append({"role": item["role"], "content": _text(item.get("content"))})
    return out or None


def tokenize_body(path: str, obj: dict, model: str) -> bytes | None:
    """What vLLM's POST /tokenize takes to count this request's prompt as the route would
    (the chat template applied to messages); None when it cannot say it in one call."""
    if path == COMPLETIONS:
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            return None
        return json.dumps({"model": model, "prompt": prompt}).encode()
    found = messages(path, obj)
    if found is None:
        return None
    body: dict[str, Any] = {"model": model, "messages": found, "add_generation_prompt": True}
    if path == CHAT and isinstance(obj.get("tools"), list):
        body["tools"] = obj["tools"]
    return json.dumps(body).encode()


def estimate(path: str, obj: dict) -> int:
    """About how many tokens the prompt is, from its text (BYTES_PER_TOKEN)."""
    if path == COMPLETIONS:
        prompt = obj.get("prompt")
        texts = [prompt] if isinstance(prompt, str) else prompt
        texts = [t for t in texts if isinstance(t, str)] if isinstance(texts, list) else []
    else:
        texts = [m["content"] for m in messages(path, obj) or ()]
    size = sum(len(t.encode("utf-8", "replace")) for t in texts)
    return math.ceil(size / BYTES_PER_TOKEN)


def choices_per_prompt(obj: dict) -> int:
    """The request's `n` (choices per prompt), 1 when unset or not a sensible number."""
    n = obj.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1024 else 1
