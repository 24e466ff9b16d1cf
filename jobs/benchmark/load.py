"""A benchmark's load: each level of the plan (plan.py) as concurrent requests through a
Gateway of its own in this process, on this thread's event loop. Every request takes the
gateway's whole way (the credential, the route, the runtime's dialect, the replica choice,
the proxy and the meter) without leaving the process, so no address of the console is needed
and a stream's events are timed as the gateway hands them on.

    outcome = asyncio.run(run(plan, "qwen-chat", organization_id, secret))
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

from jobs.gateway.app import Gateway
from jobs.gateway.metering import Meter, process_meter
from jobs.gateway.proxy import Timeouts
from jobs.gateway.snapshot import SnapshotKeeper

from . import plan as p
from . import prompts
from .stats import LevelFigures, Sample, summarise

# A benchmark's request waits this long for a model server's connection or its next chunk.
TIMEOUTS = Timeouts(connect=5.0, read=30.0)
TOKENIZE_TIMEOUT = aiohttp.ClientTimeout(total=5.0)
BOUNDARY = "servedeck-benchmark-boundary"


@dataclass
class Outcome:
    prompt_source: str
    prompt_tokens: int
    levels: list[LevelFigures] = field(default_factory=list)
    first_error: str = ""  # one failed request's answer, to say why requests failed


class _Exchange:
    """One request's ASGI conversation with the gateway, timed as the answer arrives."""

    def __init__(self, body: bytes, content_type: bytes, secret: str, stop: asyncio.Event):
        self.body, self.stop = body, stop
        self.headers = [
            (b"authorization", b"Bearer " + secret.encode()),
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
        ]
        self.started = time.perf_counter()
        self.status = 0
        self.sse = False
        self.buffer = b""
        self.answer = b""
        self.first: float | None = None
        self.last = 0.0
        self.gaps: list[float] = []
        self.events = 0
        self.usage_tokens: int | None = None
        self.error = ""
        self._sent = False

    def scope(self, path: str) -> dict:
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": self.headers,
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }

    async def receive(self) -> dict:
        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.stop.wait()  # past the level's grace: hang up, as a client would
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        now = time.perf_counter()
        if message["type"] == "http.response.start":
            self.status = message["status"]
            kinds = [v for k, v in message.get("headers", []) if k == b"content-type"]
            self.sse = bool(kinds) and kinds[0].startswith(b"text/event-stream")
            return
        chunk = message.get("body", b"")
        if not self.sse:
            if len(self.answer) < 4096:
                self.answer += chunk[: 4096 - len(self.answer)]
            return
        self.buffer += chunk
        *events, self.buffer = self.buffer.split(b"\n\n")
        tokens = sum(self._event(event) for event in events)
        if not tokens:
            return
        if self.first is None:
            self.first = now
            self.gaps.extend([0.0] * (tokens - 1))  # they came in the same chunk
        else:
            self.gaps.extend([(now - self.last) / tokens] * tokens)
        self.last = now

    def _event(self, event: bytes) -> int:
        """The content-bearing events in one SSE event (0 or 1); notes usage and errors."""
        data = b"".join(
            line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            return 0
        try:
            obj = json.loads(data)
        except ValueError:
            return 0
        if not isinstance(obj, dict):
            return 0
        if "error" in obj:
            self.error = str(obj["error"])[:300]
            return 0
        usage = obj.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        choices = obj.get("choices")
        texts = [
            (c.get("delta") or {}).get("content")
            for c in choices or []
            if isinstance(c, dict) and isinstance(c.get("delta"), dict)
        ]
        if any(isinstance(t, str) and t for t in texts):
            self.events += 1
            return 1
        return 0

    def sample(self, streams: bool) -> Sample:
        end = time.perf_counter()
        ok = self.status == 200 and not self.error and (not streams or self.first is not None)
        if not ok and not self.error:
            said = self.answer[:300].decode(errors="replace")
            self.error = (
                "the stream carried no text" if self.sse else f"status {self.status}: {said}"
            )
        tokens = self.usage_tokens if self.usage_tokens is not None else self.events
        return Sample(
            ok=ok,
            latency=end - self.started,
            ttft=(self.first - self.started) if self.first is not None else None,
            gaps=self.gaps,
            output_tokens=tokens if ok else 0,
            error=self.error,
        )


def _body(plan: p.Plan, model: str, index: int, words: int) -> tuple[bytes, bytes]:
    """Request `index`'s body and content type."""
    if plan.task == p.SPEECH:
        parts = [
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}\r\n',
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="response_format"\r\n\r\n'
            "json\r\n",
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
            'filename="tone.wav"\r\nContent-Type: audio/wav\r\n\r\n',
        ]
        audio = prompts.wav_tone(p.AUDIO_SECONDS)
        body = "".join(parts).encode() + audio + f"\r\n--{BOUNDARY}--\r\n".encode()
        return body, f"multipart/form-data; boundary={BOUNDARY}".encode()
    text = prompts.prompt_text(index, words)
    if plan.task == p.EMBEDDING:
        obj = {"model": model, "input": text}
    else:
        obj = {
            "model": model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": plan.max_output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    return json.dumps(obj).encode(), b"application/json"


async def _one(gateway, plan, model, secret, index, words, stop, hard_stop) -> Sample:
    body, kind = _body(plan, model, index, words)
    exchange = _Exchange(body, kind, secret, stop)
    try:
        await asyncio.wait_for(
            gateway.handle(exchange.scope(plan.route), exchange.receive, exchange.send),
            # a second after the level hangs up, so a stream ends as a client's would first
            max(hard_stop + 1.0 - time.perf_counter(), 0.1),
        )
    except TimeoutError:
        exchange.error = "no answer before the level's end and its grace"
        exchange.status = exchange.status or 504
    return exchange.sample(plan.task == p.CHAT)


async def _level(
    gateway, plan, level: p.Level, model, secret, words, first_index
) -> tuple[list[Sample], float]:
    started = time.perf_counter()
    ends = started + level.max_seconds
    hard_stop = ends + p.GRACE_SECONDS
    stop = asyncio.Event()
    issued = 0
    samples: list[Sample] = []

    async def worker() -> None:
        nonlocal issued
        while issued < level.max_requests and time.perf_counter() < ends:
            index = first_index + issued
            issued += 1
            samples.append(await _one(gateway, plan, model, secret, index, words, stop, hard_stop))

    loop = asyncio.get_running_loop()
    hang_up = loop.call_at(loop.time() + level.max_seconds + p.GRACE_SECONDS, stop.set)
    try:
        await asyncio.gather(*(worker() for _ in range(level.concurrency)))
    finally:
        hang_up.cancel()
        stop.set()
    return samples, time.perf_counter() - started


async def _count_tokens(gateway, route, model: str, text: str) -> int | None:
    """The prompt's tokens by the model's own tokenizer (vLLM's POST /tokenize), or None."""
    session = gateway.upstream.session or gateway.upstream.open()
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    try:
        async with session.post(
            route.upstream + "/tokenize",
            json=body,
            timeout=TOKENIZE_TIMEOUT,
            allow_redirects=False,
        ) as response:
            if response.status != 200:
                return None
            found = (await response.json(content_type=None)).get("count")
    except Exception:  # noqa: BLE001 - no tokenizer to reach: the estimate then
        return None
    return found if isinstance(found, int) and found > 0 else None


async def _sized(gateway, plan: p.Plan, model: str, organization_id: int) -> tuple[str, int, int]:
    """(how the prompt was sized, its tokens, its words): the word count whose prompt the
    model's tokenizer counts closest to the plan's tokens, in at most MAX_FITS counts; the
    estimate where no tokenizer answers."""
    if plan.task == p.SPEECH:
        return prompts.AUDIO, 0, 0
    target = plan.prompt_tokens
    words = prompts.estimated_words(target)
    route = gateway.keeper.current.routes.get((organization_id, model))
    if route is None or route.runtime != "vllm" or not route.upstream:
        return prompts.ESTIMATE, target, words
    best: tuple[int, int, int] | None = None  # (distance, words, tokens)
    for _ in range(prompts.MAX_FITS):
        counted = await _count_tokens(gateway, route, model, prompts.prompt_text(0, words))
        if counted is None:
            break
        if best is None or abs(counted - target) < best[0]:
            best = (abs(counted - target), words, counted)
        if counted == target:
            break
        words = prompts.next_guess(target, words, counted)
    if best is None:
        return prompts.ESTIMATE, target, prompts.estimated_words(target)
    return prompts.TOKENIZER, best[2], best[1]


async def run(
    plan: p.Plan, model: str, organization_id: int, secret: str, meter: Meter | None = None
) -> Outcome:
    """Every level of `plan` against the application `model`, one after the other."""
    gateway = Gateway(
        meter=meter if meter is not None else process_meter(),
        keeper=SnapshotKeeper(),
        timeouts=TIMEOUTS,
        start_meter=False,  # the meter's flushing is its process's business
    )
    await gateway.startup()
    try:
        async with asyncio.timeout(plan.max_seconds):  # the plan's bound, whatever happens
            return await _levels(gateway, plan, model, organization_id, secret)
    finally:
        await gateway.shutdown()


async def _levels(gateway, plan: p.Plan, model: str, organization_id: int, secret: str) -> Outcome:
    source, tokens, words = await _sized(gateway, plan, model, organization_id)
    outcome = Outcome(source, tokens)
    index = 0
    for level in plan.levels:
        samples, seconds = await _level(gateway, plan, level, model, secret, words, index)
        index += len(samples)
        outcome.levels.append(summarise(level.concurrency, samples, seconds, plan.task == p.CHAT))
        failed = next((s.error for s in samples if not s.ok and s.error), "")
        outcome.first_error = outcome.first_error or failed
    return outcome
