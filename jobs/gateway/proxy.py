"""The upstream client: ONE aiohttp ClientSession per gateway process (pooled keep-alive
connections to every model server), and the reading of what comes back: usage from a JSON
answer, and Server-Sent Events passed on event by event as they arrive, counted as they go
(what a stream delivered is what it is metered with), with the usage the gateway asked for
taken out when the client did not ask for it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

# The answer's usage, read from the end of the body without parsing all of it (an embeddings
# answer can be megabytes of floats).
# Chat, completions and embeddings say prompt/completion tokens; the Responses API input/output.
_PROMPT = re.compile(rb'"(?:prompt|input)_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"(?:completion|output)_tokens"\s*:\s*(\d+)')
_ERROR_EVENT = re.compile(rb'^data:\s*\{\s*"(?:error"|object"\s*:\s*"error")', re.M)
_USAGE_AT = re.compile(rb'"usage"\s*:\s*\{')
# A `usage` member and its object (which may hold one level of objects).
_USAGE_MEMBER = re.compile(rb'"usage"\s*:\s*\{(?:[^{}]++|\{[^{}]*+\})*+\}')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_INDEX = re.compile(rb'"index"\s*:\s*(\d+)')
# A choice that carries generated text: a chat delta's content, reasoning or refusal (a string
# not empty), its tool calls, or a completion's text. (Inside a JSON string every quote is
# escaped, so the text itself never looks like a field.)
_GENERATED = re.compile(
    rb'"(?:content|reasoning_content|reasoning|refusal|text)"\s*:\s*"[^"]'
    rb'|"tool_calls"\s*:\s*\[\s*\{'
)
_DELTA_TYPE = re.compile(rb'"type"\s*:\s*"response\.[a-z_.]*delta"')


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
        """The event as the client gets it (None: not at all), its counts noted. Read with a
        few searches, not parsed: it runs for every event of every stream."""
        if b'"error"' in event and _ERROR_EVENT.search(event):
            self.failed = True
            return event
        at = event.rfind(b'"usage"')
        usage = usage_of(event[at:]) if at >= 0 and _USAGE_AT.match(event, at) else None
        choices = event.find(b'"choices"')
        if choices >= 0:
            if _EMPTY_CHOICES.match(event, choices):
                if usage is not None:  # the usage-only chunk: the whole answer's
                    self.final = usage
                    if not self.keep_usage:
                        return None
                return event
            found = _INDEX.search(event, choices)
            index = int(found.group(1)) if found is not None else 0
            if _GENERATED.search(event, choices):
                self.deltas[index] = self.deltas.get(index, 0) + 1
            if usage is not None:
                if not self.running_asked:
                    self.final = usage  # a runtime that puts its totals in a last chunk
                    return event
                self.running[index] = max(self.running.get(index, 0), usage[1])
                self.prompts[index // self.per_prompt] = usage[0]
                if not self.keep_running:
                    return _without_usage(event, at)
            return event
        if b'"type"' in event:  # the Responses API's events
            if _DELTA_TYPE.search(event):
                self.deltas[0] = self.deltas.get(0, 0) + 1
            elif usage is not None:  # response.completed (or incomplete, failed)
                self.final = usage
        return event


def _without_usage(event: bytes, at: int) -> bytes:
    """The event without its `usage` member (which starts at `at`) and the comma that
    separates it; the client's bytes otherwise unchanged."""
    found = _USAGE_MEMBER.match(event, at)
    if found is None:
        return event
    before, after = event[:at].rstrip(), event[found.end() :]
    if before.endswith(b","):
        return before[:-1] + after
    rest = after.lstrip()
    return event[:at] + rest[1:] if rest.startswith(b",") else event
