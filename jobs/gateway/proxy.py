"""The upstream client: ONE aiohttp ClientSession per gateway process (pooled keep-alive
connections to every model server), and the reading of what comes back: usage from a JSON
answer, and Server-Sent Events passed on event by event as they arrive, with the usage-only
chunk the gateway asked for taken out when the client did not ask for it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

# The answer's usage, read from the end of the body without parsing all of it (an embeddings
# answer can be megabytes of floats).
# Chat, completions and embeddings say prompt/completion tokens; the Responses API input/output.
_PROMPT = re.compile(rb'"(?:prompt|input)_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"(?:completion|output)_tokens"\s*:\s*(\d+)')
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_ERROR_EVENT = re.compile(rb'^data:\s*\{\s*"(?:error"|object"\s*:\s*"error")', re.M)


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
    one waits for its end (upstreams send whole events, so nothing is held in practice)."""

    __slots__ = ("buffer", "keep_usage", "prompt_tokens", "completion_tokens", "failed")

    def __init__(self, keep_usage: bool) -> None:
        self.buffer = b""
        self.keep_usage = keep_usage
        self.prompt_tokens = 0
        self.completion_tokens = 0
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
        if b'"usage"' not in ready and b'"error"' not in ready:
            return ready  # the common chunk: no parsing at all
        kept = []
        for event in ready.split(b"\n\n"):
            if not event:
                continue
            if _ERROR_EVENT.search(event):
                self.failed = True
            elif _USAGE_OBJECT.search(event):
                prompt, completion = usage_of(event)
                self.prompt_tokens, self.completion_tokens = prompt, completion
                if not self.keep_usage and _EMPTY_CHOICES.search(event):
                    continue
            kept.append(event + b"\n\n")
        return b"".join(kept)

    def rest(self) -> bytes:
        """What was held when the stream ended (an event without its blank line)."""
        rest, self.buffer = self.buffer, b""
        return rest
