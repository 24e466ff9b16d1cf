"""The upstream client: ONE aiohttp ClientSession per gateway process (pooled keep-alive
connections to every model server), and the reading of what comes back: usage from a JSON
answer, and Server-Sent Events passed on event by event as they arrive, counted as they go
(what a stream delivered is what it is metered with), with the usage the gateway asked for
taken out when the client did not ask for it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import aiohttp

# The answer's usage, read from the end of the body without parsing all of it (an embeddings
# answer can be megabytes of floats).
# Chat, completions and embeddings say prompt/completion tokens; the Responses API input/output.
_PROMPT = re.compile(rb'"(?:prompt|input)_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"(?:completion|output)_tokens"\s*:\s*(\d+)')
_ERROR_EVENT = re.compile(rb'^data:\s*\{\s*"(?:error"|object"\s*:\s*"error")', re.M)
_DATA = re.compile(rb"^data:[ ]?(.*)$", re.M)
# A `usage` member with its object (which may hold one level of objects), and the comma before
# it (or after it, when it comes first).
_USAGE_OBJECT = rb'"usage"\s*:\s*\{(?:[^{}]|\{[^{}]*\})*\}'
_USAGE_MEMBER = re.compile(rb",\s*" + _USAGE_OBJECT + rb"|" + _USAGE_OBJECT + rb"\s*,")
_DELTA_FIELDS = ("content", "reasoning_content", "reasoning", "refusal", "tool_calls")


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 5.0  # to open a connection to the model server
    read: float = 600.0  # a whole answer; for a stream, the longest wait between chunks


class Upstream:
    """The shared session; created inside the running event loop, closed on shutdown."""

    def __init__(self, timeouts: Timeouts) -> None:
        self.timeouts = timeouts
        self.session: aiohttp.ClientSession | None = None
        self.plain = aiohttp.ClientTimeout(
            total=timeouts.read, sock_connect=timeouts.connect, connect=timeouts.connect
        )
        self.streaming = aiohttp.ClientTimeout(
            total=None,
            sock_connect=timeouts.connect,
            connect=timeouts.connect,
            sock_read=timeouts.read,
        )

    def open(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60, keepalive_timeout=30)
            self.session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None


def usage_of(body: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens of a JSON answer's `usage`, 0 when it has none."""
    at = body.rfind(b'"usage"')
    if at < 0:
        return 0, 0
    tail = body[at:]
    prompt, completion = _PROMPT.search(tail), _COMPLETION.search(tail)
    return (int(prompt.group(1)) if prompt else 0, int(completion.group(1)) if completion else 0)


class EventFilter:
    """Cuts an SSE byte stream at event boundaries: complete events go on at once, a partial
    one waits for its end (upstreams send whole events, so nothing is held in practice).

    It also counts what went to the client, so a stream is metered with what it delivered
    however it ends: the runtime's totals when it said them (the usage-only chunk, a last
    chunk's usage, the Responses API's response.completed); else, per choice, vLLM's running
    usage (`continuous_usage_stats`, asked with `running`) or one token per event carrying
    generated text. Usage the gateway asked for and the client did not is taken out."""

    __slots__ = (
        "buffer",
        "keep_usage",
        "keep_running",
        "running_asked",
        "per_prompt",
        "final",
        "running",
        "prompts",
        "deltas",
        "failed",
    )

    def __init__(
        self,
        keep_usage: bool = True,
        running: bool = False,
        keep_running: bool = True,
        per_prompt: int = 1,
    ) -> None:
        self.buffer = b""
        self.keep_usage = keep_usage  # the client asked for the usage-only chunk
        self.running_asked = running  # the gateway asked for usage on every chunk
        self.keep_running = keep_running  # ... and so did the client
        self.per_prompt = max(per_prompt, 1)  # choices per prompt (`n`)
        self.final: tuple[int, int] | None = None  # the whole answer's, as the runtime said
        self.running: dict[int, int] = {}  # choice index -> completion tokens so far
        self.prompts: dict[int, int] = {}  # prompt number -> its tokens, from running usage
        self.deltas: dict[int, int] = {}  # choice index -> events that carried generated text
        self.failed = False

    def feed(self, data: bytes) -> bytes:
        """What of `data` (after what was held) goes to the client now."""
        if self.buffer:
            data = self.buffer + data
        end = data.rfind(b"\n\n")
        if end < 0:
            self.buffer = data
            return b""
        ready, self.buffer = data[: end + 2], data[end + 2 :]
        kept = []
        for event in ready.split(b"\n\n"):
            if event:
                out = self._read(event)
                if out is not None:
                    kept.append(out + b"\n\n")
        return b"".join(kept)

    def rest(self) -> bytes:
        """What was held when the stream ended (an event without its blank line)."""
        rest, self.buffer = self.buffer, b""
        return rest

    def counted(self) -> tuple[int | None, int]:
        """(prompt, completion) tokens of what went to the client; the prompt is None when no
        usage said it (the caller counts it another way)."""
        if self.final is not None:
            return self.final
        completion = sum(
            max(self.running.get(i, 0), self.deltas.get(i, 0))
            for i in self.running.keys() | self.deltas.keys()
        )
        return (sum(self.prompts.values()) if self.prompts else None), completion

    def _read(self, event: bytes) -> bytes | None:
        """The event as the client gets it (None: not at all), its counts noted."""
        if _ERROR_EVENT.search(event):
            self.failed = True
            return event
        found = _DATA.search(event)
        if found is None or not found.group(1).startswith(b"{"):
            return event  # a comment, or data: [DONE]
        try:
            obj = json.loads(found.group(1))
        except (ValueError, RecursionError):
            return event
        if not isinstance(obj, dict):
            return event
        usage, choices = obj.get("usage"), obj.get("choices")
        if isinstance(choices, list):
            if not choices:
                if isinstance(usage, dict):  # the usage-only chunk: the whole answer's
                    self.final = _pair(usage)
                    if not self.keep_usage:
                        return None
                return event
            index = 0
            for choice in choices:
                if isinstance(choice, dict):
                    index = choice.get("index", 0) if isinstance(choice.get("index"), int) else 0
                    if _generated(choice):
                        self.deltas[index] = self.deltas.get(index, 0) + 1
            if isinstance(usage, dict):
                if not self.running_asked:
                    self.final = _pair(usage)  # a runtime that puts its totals in a last chunk
                    return event
                prompt, completion = _pair(usage)
                self.running[index] = max(self.running.get(index, 0), completion)
                self.prompts[index // self.per_prompt] = prompt
                if not self.keep_running:
                    return _without_usage(event)
            return event
        kind = obj.get("type")
        if isinstance(kind, str):  # the Responses API's events
            if kind.endswith(".delta"):
                self.deltas[0] = self.deltas.get(0, 0) + 1
            response = obj.get("response")
            if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                self.final = _pair(response["usage"])
        return event


def _pair(usage: dict) -> tuple[int, int]:
    """(prompt, completion) of a usage object, in chat's words or the Responses API's."""
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return (
        prompt if isinstance(prompt, int) and prompt > 0 else 0,
        completion if isinstance(completion, int) and completion > 0 else 0,
    )


def _generated(choice: dict) -> bool:
    """Whether a stream choice carries generated text: a chat delta's content, reasoning,
    refusal or tool calls, or a completion's text."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return any(delta.get(field) for field in _DELTA_FIELDS)
    return bool(choice.get("text"))


def _without_usage(event: bytes) -> bytes:
    """The event without its (last) `usage` member, the client's bytes otherwise unchanged."""
    last = None
    for last in _USAGE_MEMBER.finditer(event):  # noqa: B007 (the last one is wanted)
        pass
    if last is None:
        return event
    return event[: last.start()] + event[last.end() :]
