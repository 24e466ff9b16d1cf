"""The gateway's ASGI application: authenticate, apply the policy and limits, route by `model`
(or host name), proxy with streaming, meter once (a stream with what it sent, however it
ends). No database query and no log line per request; everything a request needs is in the
current Snapshot (a call it would refuse may wait for the keeper's shared look for a change).

    app = Gateway(meter=Meter())          # then serve it with any ASGI server
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from . import dialects, media, prompt, replica_choice, request, speech, split, upstream_failures
from .errors import UNAUTHORIZED, GatewayError, bounded
from .limits import LocalLimiter, Refused
from .metering import Meter, RequestRecord
from .proxy import EventFilter, Timeouts, Upstream, usage_of
from .replicas import Router
from .request import ClientGone
from .snapshot import Key, Route, SnapshotKeeper, models_body
from .waking import WAKE_WAIT_SECONDS, HeldStream, Waker

logger = logging.getLogger(__name__)

# public path -> kind of body; nothing else reaches a model server.
JSON_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/score",
        "/v1/rerank",
    }
)
AUDIO_ROUTES = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
STREAMING_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
# Routes whose streams carry `usage` when asked with stream_options (the Responses API sends
# usage in its response.completed event anyway).
USAGE_OPTION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})
# Runtimes that put usage on every chunk when asked (vLLM's continuous_usage_stats) and count a
# prompt at POST /tokenize: a stream cut short is metered with exactly what it sent.
RUNNING_USAGE_RUNTIMES = frozenset({"vllm"})
# How long counting a cut-short stream's prompt at the runtime's /tokenize may take.
TOKENIZE_TIMEOUT = aiohttp.ClientTimeout(total=5.0)
_COUNT = re.compile(rb'"count"\s*:\s*(\d+)')
# How long a shutdown waits for the requests the server cancelled to settle.
SHUTDOWN_WAIT_SECONDS = 10.0
MAX_JSON_BODY = 8 * 1024 * 1024
MAX_AUDIO_BODY = 32 * 1024 * 1024  # OpenAI takes audio files up to 25 MB
# The most of a plain (not streamed) answer the gateway reads, passed through or rebuilt from a
# runtime's dialect (2048 texts of 1024-dimension embeddings as JSON floats are about 40 MB).
MAX_ANSWER = 64 * 1024 * 1024
MODELS_ROUTE = "/v1/models"
RESPONSES_ROUTE = "/v1/responses"
OTHER = "other"
_JSON = b"application/json"
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(slots=True)
class Exchange:
    """One request's facts, filled in as the request goes (the metering record's source)."""

    started: float
    route: str
    status: int = 0
    key: Key | None = None
    target: Route | None = None
    stream: bool = False
    ttft: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_in_stream: bool = False
    complete: bool = False  # the last byte of the answer is being sent
    events: EventFilter | None = None  # a stream's counts of what it sent, once it began
    reply: Any = None  # the send a held stream answers through (waking.py), else None
    revision: int | None = None  # the revision that answered, during a Canary rollout


class Gateway:
    def __init__(
        self,
        meter: Meter | None = None,
        keeper: SnapshotKeeper | None = None,
        redis_url: str | None = None,
        timeouts: Timeouts | None = None,
        start_meter: bool = True,
        redis_max_connections: int = 100,  # redis-py's own default
        media_urls: str = media.DATA_ONLY,
        wake_wait: float = WAKE_WAIT_SECONDS,
    ) -> None:
        self.media_urls = media_urls  # which media links a body may hold (media.py)
        self.meter = meter if meter is not None else Meter()
        self.keeper = keeper if keeper is not None else SnapshotKeeper(redis_url=redis_url)
        self.redis_url = redis_url
        self.redis_max_connections = redis_max_connections
        self.upstream = Upstream(timeouts or Timeouts())
        self.limiter = LocalLimiter()
        self.router = Router()
        self.waker = Waker(self.keeper, wait=wake_wait)  # requests to sleeping models
        self._scraper: asyncio.Task | None = None
        self.start_meter = start_meter
        self.max_answer = MAX_ANSWER
        self.started = False
        self._starting: asyncio.Lock | None = None
        self.answering = 0  # requests being answered now
        self._idle: asyncio.Event | None = None  # set when none is, while shutting down

    # -- lifecycle

    async def startup(self) -> None:
        """Load the snapshot (in a thread), open the session and the limiter. Idempotent."""
        if self.started:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.started:
                return
            await asyncio.get_running_loop().run_in_executor(None, self.keeper.start)
            if self.redis_url:
                from .limits import RedisLimiter

                self.limiter = RedisLimiter(
                    self.redis_url, max_connections=self.redis_max_connections
                )
            self.upstream.open()
            self._scraper = asyncio.ensure_future(
                self.router.keep_scraping(self.upstream.open, self._routes)
            )
            if self.start_meter:
                self.meter.start()
            self.started = True

    async def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        if self.answering:
            # Requests the server cancelled settle their tokens and slots first.
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), SHUTDOWN_WAIT_SECONDS)
        if self._scraper is not None:
            self._scraper.cancel()
        await self.upstream.close()
        await self.limiter.close()
        await asyncio.get_running_loop().run_in_executor(None, self.keeper.stop)
        self.meter.flush()

    async def lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as error:
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- ASGI

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            if not self.started:
                await self.startup()  # servers without lifespan (daphne): on first request
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            await self.lifespan(receive, send)

    async def handle(self, scope, receive, send) -> None:
        ex = Exchange(time.perf_counter(), route_of(scope["path"]))
        self.answering += 1
        try:
            await self.serve(ex, scope, receive, send)
        except GatewayError as error:
            ex.status = error.status
            await _send_error(ex.reply or send, error)
        except ClientGone:
            ex.status = 499
        except Exception:
            # Never a traceback to the client; one log line with no request data in it.
            logger.exception("gateway: unexpected failure on %s", bounded(ex.route, 60))
            ex.status = 500
            # The answer may have started already; then there is nothing more to say.
            with contextlib.suppress(Exception):
                await _send_error(
                    ex.reply or send, GatewayError(500, "The gateway failed; try again.")
                )
        finally:
            self.meter.record(self._record(ex))
            self.answering -= 1
            if self._idle is not None and not self.answering:
                self._idle.set()

    def _record(self, ex: Exchange) -> RequestRecord:
        end = time.perf_counter()
        key, target = ex.key, ex.target
        return RequestRecord(
            at=time.time(),
            status=ex.status,
            latency_ms=(end - ex.started) * 1000.0,
            organization_id=key.organization_id if key is not None else None,
            application_id=target.id if target is not None else None,
            api_key_id=key.id if key is not None and not key.benchmark else None,
            benchmark=key is not None and key.benchmark,  # metered apart (metering.py)
            route=ex.route,
            stream=ex.stream,
            ttft_ms=(ex.ttft - ex.started) * 1000.0 if ex.ttft is not None else None,
            prompt_tokens=ex.prompt_tokens,
            completion_tokens=ex.completion_tokens,
            failed_in_stream=ex.failed_in_stream,
            revision=ex.revision,
            adapter=target.name if target is not None and target.base else "",
        )

    async def serve(self, ex: Exchange, scope, receive, send) -> None:
        path, method = scope["path"], scope["method"]
        is_json = path in JSON_ROUTES
        if path == "/metrics" and method == "GET":
            # Prometheus text from the meter (rendered by the metering side), when it has one.
            # It names every organisation's applications, so never to a client from outside.
            # An application's host routes every path here (its HTTPRoute sends / to the
            # gateway), so /metrics is answered on the gateway's own address only.
            render = getattr(self.meter, "render_metrics", None)
            if (
                render is not None
                and request.from_scraper_network(scope)
                and not request.names_application_host(scope, self.keeper.current)
            ):
                ex.status = 200
                await _send_whole(send, 200, render().encode(), b"text/plain; version=0.0.4")
                return
        if ex.route in (OTHER, "/metrics"):
            ex.route = OTHER
            raise GatewayError(
                404,
                f"Unknown path {bounded(path, 60)}: the gateway serves "
                "/v1/models, /v1/chat/completions, /v1/completions, /v1/responses, "
                "/v1/embeddings, /v1/score, /v1/rerank and /v1/audio/*.",
            )
        authorization = api_key = host = content_type = b""
        length = -1
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name == b"x-api-key":
                api_key = value
            elif name == b"host":
                host = value
            elif name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = int(value) if value.isdigit() else -1
        presented = api_key or (
            authorization[7:] if authorization[:7].lower() == b"bearer " else b""
        )
        snapshot = self.keeper.current
        now = time.time()
        secret = presented.strip().decode("latin-1")
        key = snapshot.authenticate(secret, now) if presented else None
        if key is None and presented:
            # A key made a moment ago, by this process or another, works on its first call.
            snapshot = await self.keeper.fresh(ex.started)
            key = snapshot.authenticate(secret, now)
        if key is None:
            raise UNAUTHORIZED
        ex.key = key
        if not key.benchmark:  # a benchmark's credential is no key: no last use to write
            self.keeper.touch(key.id, now)
        if ex.route == MODELS_ROUTE:
            await self.models(ex, snapshot, key, path, method, send)
            return
        if method != "POST":
            raise GatewayError(405, f"{path} takes POST, not {bounded(method, 10)}.")
        limit = MAX_JSON_BODY if is_json else MAX_AUDIO_BODY
        if length > limit:
            raise request.too_large(limit)
        body = await request.read_body(receive, limit)
        host_name = request.host_name(host) if host else ""
        if is_json:
            model, obj = request.json_model(body)
            stream = path in STREAMING_ROUTES and request.wants_stream(obj)
            if path == RESPONSES_ROUTE:
                request.refuse_background(obj)
        else:
            parts = request.form(body, content_type)
            model, obj, stream = speech.field_text(parts, "model"), None, False
        if snapshot.may_change_for(key, model, host_name):
            # A model made, granted or turned Running a moment ago answers its first call.
            fresher = await self.keeper.fresh(ex.started)
            if fresher is not snapshot:
                snapshot = fresher
                key = snapshot.authenticate(secret, now)
                if key is None:
                    raise UNAUTHORIZED
                ex.key = key
        host_route = snapshot.hosts.get(host_name) if host else None
        target = request.target(snapshot, key, model, host_route)
        ex.target = target
        self.meter.begin(target.id)  # until its record: an answer in progress keeps it awake
        grant = snapshot.grant(key, target)
        if grant.refusal is not None:
            raise grant.refusal
        if grant.networks:
            request.check_network(grant, scope, target)
        if is_json:
            # After the key and its grant: a caller who may not call the model learns nothing
            # of it, and no lookup is made for them.
            await media.check(obj, self.media_urls)
        headers = _headers_for(content_type)
        if is_json and host_route is not None and model is None:
            obj["model"] = target.name
            body = json.dumps(obj).encode()
        # The runtime's dialect: None passes the client's bytes through unchanged.
        plan = dialects.plan(target.runtime, path, obj if is_json else parts, target.name)
        ex.stream = stream and plan is None
        events = None
        if ex.stream:
            running = target.runtime in RUNNING_USAGE_RUNTIMES
            keep_usage = keep_running = True
            if path in USAGE_OPTION_ROUTES:
                keep_usage, keep_running, body = request.ask_for_usage(body, obj, running)
            per_prompt = prompt.choices_per_prompt(obj)
            events = EventFilter(keep_usage, running, keep_running, per_prompt)
        if not target.running:
            # A sleeping model's request waits while it wakes (waking.py); any other is told
            # the phase and a plain reason only: the status's own reason may quote the model
            # server's log lines, which stay with the members who read them on its page.
            if ex.stream:
                ex.reply = send = HeldStream(send)  # SSE comments while it waits
            target = ex.target = await self.waker.hold(target, key.id, ex.reply)
        checks = grant.checks
        held = await self._acquire(checks, now) if checks else None
        # The replica: by the prompt's prefix and the replicas' loads (replica_choice.py),
        # another one when it failed before anything reached the client (replicas.py).
        affinity = replica_choice.affinity_key(path, obj) if is_json else None
        # During a Canary rollout, the revision: sticky per key and conversation (split.py).
        routed, ex.revision = split.pick(target, key.id, affinity, key.revision)
        try:
            if plan is not None:

                async def call(upstream: str) -> None:
                    await self.translated(ex, target, plan, send, upstream)

            else:

                async def call(upstream: str) -> None:
                    url = _url(upstream, path)
                    await self.forward(ex, url, body, headers, stream, events, receive, send)

            try:
                await self.router.send(routed, affinity, call, lambda: ex.status != 0)
            except upstream_failures.ReplicaFailed as failure:
                # Its snapshot said Running, but the model went to sleep since: the request
                # waits while it wakes, as one that found it asleep (waking.py).
                asleep = failure.retry and ex.status == 0 and target.sleeps
                found = await self.waker.slept_meanwhile(target) if asleep else None
                if found is None:
                    raise
                if ex.stream:
                    ex.reply = send = HeldStream(send)
                target = ex.target = await self.waker.hold(found, key.id, ex.reply)
                routed, ex.revision = split.pick(target, key.id, affinity, key.revision)
                await self.router.send(routed, affinity, call, lambda: ex.status != 0)
        finally:
            try:
                if ex.events is not None:  # whichever way the stream ended
                    await self._count_stream(ex, target, path, obj)
            finally:
                if checks:
                    await self.limiter.settle(
                        checks, time.time(), ex.prompt_tokens + ex.completion_tokens, held
                    )

    def _routes(self) -> list[Route]:
        return list(self.keeper.current.routes.values())

    async def _acquire(self, checks, now: float) -> str | None:
        try:
            return await self.limiter.acquire(checks, now)
        except Refused as refused:
            raise GatewayError(
                429,
                refused.message,
                None,
                "rate_limit_exceeded",
                ((b"retry-after", str(refused.retry_after).encode()),),
            ) from None

    async def models(self, ex, snapshot, key, path, method, send) -> None:
        if method != "GET":
            raise GatewayError(405, f"{path} takes GET, not {bounded(method, 10)}.")
        if path == "/v1/models":
            body = models_body(snapshot, key)
        else:
            name = path[len("/v1/models/") :]
            target = (
                snapshot.routes.get((key.organization_id, name))
                if path.startswith("/v1/models/")
                else None
            )
            if target is None or snapshot.grant(key, target).refusal is not None:
                raise request.unknown_model(name)
            body = json.dumps(
                {"id": name, "object": "model", "created": target.created, "owned_by": "servedeck"}
            ).encode()
        ex.status = 200
        await _send_whole(send, 200, body, _JSON)

    async def forward(self, ex, url, body, headers, stream, events, receive, send) -> None:
        """Proxy one request. For a stream, the client going away cancels it at once, which
        closes the upstream request; a plain answer is short (and bounded by the read timeout),
        so it goes without the watcher task that would cost every request."""
        if not stream:
            await self._exchange(ex, url, body, headers, stream, events, send)
            return
        task = asyncio.current_task()
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect" and not ex.complete:
                    gone.set()
                    task.cancel()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await self._exchange(ex, url, body, headers, stream, events, send)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
            ex.failed_in_stream = True
            raise ClientGone() from None
        finally:
            watcher.cancel()

    async def _exchange(self, ex, url, body, headers, stream, events, send) -> None:
        session = self.upstream.session or self.upstream.open()
        timeout = self.upstream.streaming if stream else self.upstream.plain
        try:
            # Never a redirect: it could send the caller's body to any host the gateway reaches.
            response = await session.post(
                url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            )
        except (TimeoutError, aiohttp.ClientError) as error:
            raise upstream_failures.unreachable(error, "could not be reached") from None
        async with response:
            is_sse = response.headers.get("Content-Type", "").startswith("text/event-stream")
            if stream and is_sse and response.status == 200:
                await self._stream(ex, response, events, send)
                return
            try:
                data = await upstream_failures.read_bounded(response, self.max_answer)
            except (TimeoutError, aiohttp.ClientError) as error:
                raise upstream_failures.unreachable(error, "failed while answering") from None
            status = response.status
            if status >= 500:
                raise upstream_failures.server_failed(status)
            if 300 <= status < 400:
                raise upstream_failures.redirected(status)
            if status == 200:
                ex.prompt_tokens, ex.completion_tokens = usage_of(data)
            ex.status = status
            ex.complete = True
            kind = response.headers.get("Content-Type", "application/json").encode("latin-1")
            await _send_whole(send, status, data, kind)

    async def _stream(self, ex, response, events: EventFilter, send) -> None:
        """Pass the events on as they come; what they carried is counted as they go
        (ex.events), so a stream that ends early is metered with what it sent."""
        ex.events = events
        ex.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        failure = None
        try:
            async for data in response.content.iter_any():
                out = events.feed(data)
                if out:
                    if ex.ttft is None:
                        ex.ttft = time.perf_counter()
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except TimeoutError:
            failure = (
                "The model server stopped sending in the middle of the answer.",
                "upstream_timeout",
            )
        except aiohttp.ClientError:
            failure = ("The model server failed in the middle of the answer.", "upstream_failed")
        tail = events.rest()
        if failure is not None:
            message, code = failure
            error = {
                "error": {"message": message, "type": "server_error", "param": None, "code": code}
            }
            tail += b"data: " + json.dumps(error).encode() + b"\n\n"
        ex.failed_in_stream = events.failed or failure is not None
        ex.complete = True
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _count_stream(self, ex: Exchange, target: Route, path: str, obj: dict) -> None:
        """A stream's tokens, from what it sent to the client: the runtime's usage, else its
        text events; a prompt no usage said is counted by the runtime's tokenizer, or
        estimated from its text where the runtime has none."""
        prompt_tokens, ex.completion_tokens = ex.events.counted()
        if prompt_tokens is None:
            prompt_tokens = await self._tokenized(target, path, obj)
        ex.prompt_tokens = prompt_tokens

    async def _tokenized(self, target: Route, path: str, obj: dict) -> int:
        body = prompt.tokenize_body(path, obj, target.name)
        if body is not None and target.runtime in RUNNING_USAGE_RUNTIMES:
            session = self.upstream.session or self.upstream.open()
            try:
                async with session.post(
                    _url(target.upstream, "/tokenize"),
                    data=body,
                    headers=_JSON_HEADERS,
                    timeout=TOKENIZE_TIMEOUT,
                    allow_redirects=False,
                ) as response:
                    data = await upstream_failures.read_bounded(response, self.max_answer)
                    found = _COUNT.search(data) if response.status == 200 else None
                    if found is not None:
                        return int(found.group(1))
            except (TimeoutError, aiohttp.ClientError, GatewayError):
                pass  # the estimate below
        return prompt.estimate(path, obj)

    async def translated(self, ex, target, plan: dialects.Plan, send, upstream: str) -> None:
        """One request in the runtime's own terms (dialects.py), its answer rebuilt in the
        client's; read whole, at most MAX_ANSWER of it."""
        session = self.upstream.session or self.upstream.open()
        try:
            async with session.post(
                _url(upstream, plan.path),
                data=plan.body,
                headers={"Content-Type": plan.content_type},
                timeout=self.upstream.plain,
                allow_redirects=False,
            ) as response:
                status = response.status
                data = await upstream_failures.read_bounded(response, self.max_answer)
        except (TimeoutError, aiohttp.ClientError) as error:
            raise upstream_failures.unreachable(error, "could not be reached") from None
        if status >= 500:
            raise upstream_failures.server_failed(status)
        if 300 <= status < 400:
            raise upstream_failures.redirected(status)
        if status != 200:
            raise dialects.refused(status, data, plan.label)
        kind, out = plan.finish(data)
        ex.prompt_tokens, ex.completion_tokens = usage_of(out)
        ex.status = 200
        ex.complete = True
        await _send_whole(send, 200, out, kind)


# --- small pieces ------------------------------------------------------------------------------


def route_of(path: str) -> str:
    """The route a request is metered under: a public route, /v1/models whichever model was
    asked about, /metrics, or "other". Never the client's own path: the meter keeps every
    route it saw for the life of the process (/metrics lists them), key or no key."""
    if path in JSON_ROUTES or path in AUDIO_ROUTES or path == "/metrics":
        return path
    if path == MODELS_ROUTE or path.startswith(MODELS_ROUTE + "/"):
        return MODELS_ROUTE
    return OTHER


_URLS: dict[tuple[str, str], URL] = {}


def _url(upstream: str, path: str) -> URL:
    """The upstream URL, parsed once per application and route."""
    found = _URLS.get((upstream, path))
    if found is None:
        if len(_URLS) > 10_000:
            _URLS.clear()
        found = _URLS[(upstream, path)] = URL(upstream + path)
    return found


async def _send_whole(send, status: int, body: bytes, content_type: bytes, extra=()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, error: GatewayError) -> None:
    await _send_whole(send, error.status, error.body(), _JSON, error.headers)


_JSON_HEADERS = CIMultiDict({"Content-Type": "application/json"})


def _headers_for(content_type: bytes) -> CIMultiDict:
    """The headers sent upstream: only the body's type (never the caller's key)."""
    if not content_type or content_type == b"application/json":
        return _JSON_HEADERS
    return CIMultiDict({"Content-Type": content_type.decode("latin-1")})
