"""A stand-in for vLLM's OpenAI-compatible server, for tests of the local backend and the gateway.

Stdlib only, so any Python runs it. It binds 127.0.0.1 only, answers the OpenAI wire format
(ids, object, created, model, choices, usage; SSE streams ending in `data: [DONE]`) with
deterministic text and vectors, and logs one line per request to stdout like uvicorn does:

    python tests/fakes/model_server.py --port P --served-model-name NAME
        [--startup-delay S] [--crash-after S] [--fail-on-start] [--ignore-sigterm] [--spawn-worker]
        [--stream-delay S] [--answer-delay S] [--api-key KEY] [--error-rate R]
        [--runtime vllm|parakeet|infinity|faster-whisper]
        [vLLM engine arguments, logged and mostly ignored]

Routes: /v1/models, /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings,
/v1/score, /v1/rerank and /tokenize, as vLLM answers them: streams carry usage on every chunk
when asked with `stream_options.continuous_usage_stats` (and `include_usage`), a Responses API
stream only in its response.completed event. Other runtimes' dialects, as their source has them:
- `--runtime parakeet`: only /v1/audio/transcriptions in the parakeet runtime's own terms (see
  jobs/gateway/speech.py): a locale such as en-US, `timestamps=true`, JSON only.
- `--runtime infinity` (infinity-emb 0.0.78 under --url-prefix /v1): /health, /v1/models,
  /v1/embeddings (`dimensions` cuts without normalising again, `modality`), /v1/rerank in
  Cohere's shape (`return_documents`, `raw_scores`, `top_n` > 0, documents stripped, results
  best first); no /v1/score; validation errors in FastAPI's {"detail": [...]}.
- `--runtime faster-whisper` (faster-whisper-server 0.0.3): /health (no /v1/models),
  /v1/audio/transcriptions and /v1/audio/translations taking `model_name`, `language`,
  `prompt`, `temperature`, `response_format` json or verbose_json only (else its 400 in
  FastAPI's {"detail": {"error": ...}}); no words, no streaming. `--served-model-name` is
  optional: it serves the one model it was started with, whatever a request names.
The "audio" is UTF-8 text, which is what the speech dialects transcribe. GET /fake/events also
lists, for the speech dialects, the form fields each request carried ("fields: a,b").

Faults for the gateway's tests, asked per request with a top-level body field `fault`:
`hang` (never answers; notices when the client goes away), `die` (a stream that breaks off
after two chunks), `slow` (a stream with 0.2 s between chunks), `error` (an error event inside
a stream), `crash` (500). GET /fake/events lists what the server noticed (client gone, ...);
GET /fake/requests each chat request's first user message and how many of its leading messages
a modelled prefix cache (every message prefix the server saw) already held.

Flags it does not know are taken as vLLM engine arguments: logged, and `--max-num-seqs` /
`--max-model-len` honoured, so a test can check what the local backend passed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
CRASH_EXIT_CODE = 3
START_FAILURE_EXIT_CODE = 1
EMBEDDING_DIMENSIONS = 16
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_MODEL_LEN = 4096


def log(message: str) -> None:
    print(message, flush=True)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="Stand-in OpenAI-compatible model server.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default=LOOPBACK, help="accepted for vLLM's sake; loopback only")
    parser.add_argument("--startup-delay", type=float, default=0.0, help="seconds before binding")
    parser.add_argument("--crash-after", type=float, default=None, help="exit 3 after S seconds")
    parser.add_argument("--fail-on-start", action="store_true", help="exit 1 before binding")
    parser.add_argument("--ignore-sigterm", action="store_true", help="only SIGKILL stops it")
    parser.add_argument(
        "--spawn-worker",
        action="store_true",
        help="fork a worker that outlives the server, as a vLLM engine process can",
    )
    parser.add_argument("--stream-delay", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument(
        "--answer-delay", type=float, default=0.0, help="seconds before each chat answer"
    )
    parser.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    parser.add_argument(
        "--lora-modules",
        nargs="*",
        default=[],
        help="NAME=PATH LoRA adapters, as vLLM takes them: a chat may name one as its model",
    )
    parser.add_argument(
        "--error-rate",
        type=float,
        default=0.0,
        help="answer this fraction of the model requests with a 500, evenly (every 20th at 0.05)",
    )
    parser.add_argument(
        "--runtime", default="vllm", choices=["vllm", "parakeet", "infinity", "faster-whisper"]
    )
    args, engine_args = parser.parse_known_args(argv)
    if args.host not in (LOOPBACK, "localhost"):
        parser.error(f"--host {args.host}: the stand-in binds {LOOPBACK} only")
    if args.served_model_name is None:
        if args.runtime != "faster-whisper":
            parser.error("--served-model-name is required")
        args.served_model_name = "whisper-1"  # faster-whisper-server's default model_name
    return args, engine_args


def engine_option(engine_args: list[str], flag: str, default: int) -> int:
    """The integer value of `flag` among the engine arguments (`--flag N` or `--flag=N`)."""
    for index, arg in enumerate(engine_args):
        if arg == flag and index + 1 < len(engine_args):
            return int(engine_args[index + 1])
        if arg.startswith(flag + "="):
            return int(arg.split("=", 1)[1])
    return default


# --- deterministic model behaviour -------------------------------------------------------------


def count_tokens(text: str) -> int:
    """A "token" here is a whitespace-separated word: enough for usage to add up."""
    return len(text.split())


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string, or a list of parts with text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def reply_words(model: str, prompt: str, limit: int | None) -> tuple[list[str], str]:
    """The answer's words and its finish_reason ("length" when max_tokens cut it short)."""
    words = f"Hello from {model}. You said: {prompt}".split()
    if limit is not None and limit < len(words):
        return words[:limit], "length"
    return words, "stop"


def embedding(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A unit vector that depends only on the text, so equal inputs embed equally."""
    digest = b""
    counter = 0
    while len(digest) < dimensions:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    raw = [(byte - 127.5) / 127.5 for byte in digest[:dimensions]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


def usage(prompt_tokens: int, completion_tokens: int | None) -> dict[str, int]:
    out = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    if completion_tokens is not None:
        out["completion_tokens"] = completion_tokens
        out["total_tokens"] = prompt_tokens + completion_tokens
    return out


class RequestError(Exception):
    """An OpenAI-style error answer: status, message, type and the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}
        return {
            "error": {
                "message": self.message,
                "type": kind.get(self.status, "InternalServerError"),
                "param": self.param,
                "code": self.status,
            }
        }


def max_tokens_of(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(400, "max_tokens must be a whole number of 1 or more", "max_tokens")
    return value


def choice_count(body: dict[str, Any]) -> int:
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise RequestError(400, "n must be a whole number from 1 to 16", "n")
    return n


# --- the server --------------------------------------------------------------------------------


class Metrics:
    """The few vLLM Prometheus series the console reads, kept thread-safe."""

    def __init__(self, max_num_seqs: int) -> None:
        self.lock = threading.Lock()
        self.max_num_seqs = max_num_seqs
        self.in_flight = 0
        self.success = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1

    def leave(self, prompt_tokens: int = 0, generation_tokens: int = 0, ok: bool = True) -> None:
        with self.lock:
            self.in_flight -= 1
            self.success += int(ok)
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens

    def render(self, model: str) -> str:
        with self.lock:
            running = min(self.in_flight, self.max_num_seqs)
            waiting = self.in_flight - running
            series = [
                ("vllm:num_requests_running", "gauge", running, "Requests being served."),
                ("vllm:num_requests_waiting", "gauge", waiting, "Requests waiting to be served."),
                # vLLM's V1 name; a stand-in's "cache" is the share of sequences in use.
                ("vllm:kv_cache_usage_perc", "gauge", running / self.max_num_seqs, "KV-cache use."),
                ("vllm:request_success_total", "counter", self.success, "Finished requests."),
                ("vllm:prompt_tokens_total", "counter", self.prompt_tokens, "Prompt tokens."),
                ("vllm:generation_tokens_total", "counter", self.generation_tokens, "Tokens made."),
            ]
        lines = []
        for name, kind, value, help_text in series:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f'{name}{{model_name="{model}"}} {float(value)}')
        return "\n".join(lines) + "\n"


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, args: argparse.Namespace, engine_args: list[str]) -> None:
        self.model = args.served_model_name
        # The LoRA adapters it answers to besides its model (vLLM's --lora-modules NAME=PATH).
        self.adapters = {a.split("=", 1)[0] for a in args.lora_modules}
        self.api_key = args.api_key
        self.stream_delay = args.stream_delay
        self.runtime = args.runtime
        self.events: list[str] = []  # what the server noticed, for GET /fake/events
        # What it was asked, for GET /fake/requests: each chat's first user message and how
        # many of its leading messages a modelled prefix cache already held.
        self.requests: list[dict[str, Any]] = []
        self.prefixes: set[str] = set()
        self.answer_delay = args.answer_delay
        self.error_rate = args.error_rate
        self.answered = 0  # model requests so far, which --error-rate fails a share of
        self.answered_lock = threading.Lock()
        self.created = int(time.time())
        self.max_model_len = engine_option(engine_args, "--max-model-len", DEFAULT_MAX_MODEL_LEN)
        self.metrics = Metrics(engine_option(engine_args, "--max-num-seqs", DEFAULT_MAX_NUM_SEQS))
        super().__init__((LOOPBACK, port), Handler)


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked transfer for streams
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK hold every response back about 40 ms.
    disable_nagle_algorithm = True

    # -- plumbing

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # one access line per request is written by `access` instead

    def access(self, status: int) -> None:
        """The access line, written before the response: a client that has its answer can
        already read the line in the log."""
        phrase = HTTPStatus(status).phrase
        host, port = self.client_address[:2]
        log(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}')

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.access(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.access(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> bytes:
        """The whole body, read before anything can fail so a kept-alive connection stays in
        step with the next request."""
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def parse_json(self, raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise RequestError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model != self.server.model and model not in self.server.adapters:
            raise RequestError(404, f"The model `{model}` does not exist.", "model")
        return body

    def lora_adapter(self, path: str, raw: bytes) -> None:
        """vLLM's run-time adapter routes (VLLM_ALLOW_RUNTIME_LORA_UPDATING): the name joins
        or leaves the adapters a chat may name; each is logged as an event."""
        body = json.loads(raw or b"{}")
        name = body.get("lora_name")
        if path.endswith("/load_lora_adapter"):
            self.server.adapters.add(name)
            self.server.events.append(f"load_lora_adapter {name}={body.get('lora_path')}")
        elif name in self.server.adapters:
            self.server.adapters.discard(name)
            self.server.events.append(f"unload_lora_adapter {name}")
        else:
            self.send_json(
                404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}}
            )
            return
        self.send_json(200, {"ok": True})

    def authorized(self) -> bool:
        if self.server.api_key is None:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {self.server.api_key}"

    def stream(self, chunks: Any, done: bool = True) -> None:
        """Server-sent events in HTTP/1.1 chunks, each event flushed as it is made: a chunk is
        a payload, or (event type, payload); `done` ends the stream with `data: [DONE]`."""
        self.access(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fault = getattr(self, "fault", None)
        delay = 0.2 if fault == "slow" else self.server.stream_delay
        try:
            for sent, chunk in enumerate(chunks):
                if fault == "die" and sent == 2:
                    self.server.events.append("died mid-stream")
                    self.close_connection = True
                    return  # no terminating chunk: the client sees the stream break off
                if fault == "error" and sent == 2:
                    error = {
                        "error": {
                            "message": "engine failed",
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    }
                    self.write_chunk(f"data: {json.dumps(error)}\n\n")
                    break
                if isinstance(chunk, tuple):
                    kind, payload = chunk
                    self.write_chunk(f"event: {kind}\ndata: {json.dumps(payload)}\n\n")
                else:
                    self.write_chunk(f"data: {json.dumps(chunk)}\n\n")
                if delay:
                    time.sleep(delay)
            if done:
                self.write_chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log("INFO:     client went away during a stream")
            self.server.events.append("client went away during a stream")
            self.close_connection = True

    def hang(self) -> None:
        """Answer nothing until the client goes away, and note that it did."""
        import select

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                break
        self.server.events.append("client went away while waiting")
        self.close_connection = True

    def write_chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # -- routes

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        runtime = self.server.runtime
        if path == "/fake/events":
            self.send_json(200, {"events": self.server.events})
        elif path == "/fake/requests":
            self.send_json(200, {"requests": self.server.requests})
        elif runtime == "infinity":
            infinity_get(self, path)
        elif runtime == "faster-whisper":
            if path == "/health":
                self.send_json(200, {"status": "ok"})
            else:
                self.send_json(404, {"detail": "Not Found"})
        elif path == "/health":
            self.send_text(200, "", "text/plain")
        elif path == "/metrics":
            text = self.server.metrics.render(self.server.model)
            self.send_text(200, text, "text/plain; version=0.0.4")
        elif not self.authorized():
            self.send_error_json(RequestError(401, "Unauthorized"))
        elif path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [self.model_card()]})
        elif path == f"/v1/models/{self.server.model}":
            self.send_json(200, self.model_card())
        else:
            self.send_error_json(RequestError(404, f"{path} is not found"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.server.runtime == "infinity":
            infinity_post(self, self.path.split("?", 1)[0], self.read_body())
            return
        if self.server.runtime == "faster-whisper":
            whisper_post(self, self.path.split("?", 1)[0], self.read_body())
            return
        routes = {
            "/v1/chat/completions": self.chat_completions,
            "/v1/completions": self.completions,
            "/v1/embeddings": self.embeddings,
            "/v1/responses": self.responses_api,
            "/v1/score": self.score,
            "/v1/rerank": self.rerank,
            "/tokenize": self.tokenize,
        }
        if self.server.runtime == "parakeet":
            routes = {"/v1/audio/transcriptions": None}
        path = self.path.split("?", 1)[0]
        if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            self.lora_adapter(path, self.read_body())
            return
        route = routes.get(path)
        raw = self.read_body()
        try:
            if not self.authorized():
                raise RequestError(401, "Unauthorized")
            if self.path.split("?", 1)[0] not in routes:
                raise RequestError(404, f"{self.path} is not found")
            if route is None:
                self.transcribe(raw)
                return
            body = self.parse_json(raw)
            self.fault = body.get("fault")
            if self.fault == "hang":
                self.hang()
                return
            if self.fault == "crash" or self.injected_error():
                raise RequestError(500, "the engine crashed")
            route(body)
        except RequestError as error:
            self.send_error_json(error)

    def injected_error(self) -> bool:
        """--error-rate: request n fails when n * rate passes a whole number (deterministic)."""
        rate = self.server.error_rate
        if rate <= 0 or self.path.split("?", 1)[0] == "/tokenize":
            return False
        with self.server.answered_lock:
            self.server.answered += 1
            n = self.server.answered
        return math.floor(n * rate + 1e-9) > math.floor((n - 1) * rate + 1e-9)

    def form_fields(self, raw: bytes) -> dict[str, bytes] | None:
        """The fields of a multipart/form-data body by name, or None when it is not one."""
        import email
        import email.policy

        head = f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = email.message_from_bytes(head + raw, policy=email.policy.HTTP)
        if not message.is_multipart():
            return None
        fields: dict[str, bytes] = {}
        for part in message.iter_parts():
            fields[part.get_param("name", header="content-disposition")] = part.get_payload(
                decode=True
            )
        return fields

    def send_error_json(self, error: RequestError) -> None:
        self.send_json(error.status, error.body())

    def model_card(self) -> dict[str, Any]:
        return {
            "id": self.server.model,
            "object": "model",
            "created": self.server.created,
            "owned_by": "vllm",
            "root": self.server.model,
            "parent": None,
            "max_model_len": self.server.max_model_len,
        }

    def remember(self, first_user: str, messages: list[dict[str, Any]]) -> None:
        """Note a chat request: its first user message and how many of its leading messages a
        prefix cache (every message prefix this server has seen) already held."""
        keys = [json.dumps(messages[: n + 1], sort_keys=True) for n in range(len(messages))]
        cached = 0
        for key in keys:
            if key not in self.server.prefixes:
                break
            cached += 1
        self.server.prefixes.update(keys)
        self.server.requests.append(
            {"first_user": first_user, "messages": len(messages), "cached": cached}
        )

    def chat_completions(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "messages must be a non-empty list", "messages")
        if not all(isinstance(m, dict) for m in messages):
            raise RequestError(400, "each message must be an object with role and content")
        texts = [message_text(m.get("content")) for m in messages]
        users = [message_text(m.get("content")) for m in messages if m.get("role") == "user"]
        self.remember(users[0] if users else "", messages)
        # The answer is to the last user message; with a history, it also says how many
        # messages came, so a client's test can see that the earlier turns were sent.
        said = users[-1] if users else ""
        if len(messages) > 1:
            said += f" ({len(messages)} messages)"
        # The model or adapter asked for answers, by its name (vLLM's reply names it too).
        words, finish = reply_words(body["model"], said, max_tokens_of(body))
        n = choice_count(body)
        prompt_tokens = sum(count_tokens(t) for t in texts)
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": ident, "created": created, "model": body["model"]}
        self.server.metrics.enter()
        try:
            time.sleep(self.server.answer_delay)  # a model at work: counted in its queue
            if body.get("stream"):
                include_usage, running = usage_asked(body)
                chunks = chat_chunks(base, words, finish, n, prompt_tokens, include_usage, running)
                self.stream(chunks)
            else:
                message = {"role": "assistant", "content": " ".join(words), "tool_calls": []}
                choices = [
                    {"index": i, "message": message, "logprobs": None, "finish_reason": finish}
                    for i in range(n)
                ]
                reply = {"object": "chat.completion", **base, "choices": choices}
                reply["usage"] = usage(prompt_tokens, len(words) * n)
                self.send_json(200, reply)
        finally:
            self.server.metrics.leave(prompt_tokens, len(words) * n)

    def completions(self, body: dict[str, Any]) -> None:
        prompt = body.get("prompt")
        prompts = prompt if isinstance(prompt, list) else [prompt]
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise RequestError(400, "prompt must be a string or a list of strings", "prompt")
        limit = max_tokens_of(body)
        if limit is None:
            limit = 16  # OpenAI's documented default for legacy completions
        answers = [reply_words(self.server.model, p, limit) for p in prompts]
        prompt_tokens = sum(count_tokens(p) for p in prompts)
        generated = sum(len(words) for words, _ in answers)
        base = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.server.model,
        }
        self.server.metrics.enter()
        try:
            if body.get("stream"):
                include_usage, running = usage_asked(body)
                counts = [count_tokens(p) for p in prompts]
                self.stream(completion_chunks(base, answers, counts, include_usage, running))
            else:
                choices = [
                    {"index": i, "text": " ".join(w), "logprobs": None, "finish_reason": f}
                    for i, (w, f) in enumerate(answers)
                ]
                reply = {"object": "text_completion", **base, "choices": choices}
                reply["usage"] = usage(prompt_tokens, generated)
                self.send_json(200, reply)
        finally:
            self.server.metrics.leave(prompt_tokens, generated)

    def embeddings(self, body: dict[str, Any]) -> None:
        texts = embedding_inputs(body.get("input"))
        dimensions = body.get("dimensions") or EMBEDDING_DIMENSIONS
        if not isinstance(dimensions, int) or not 1 <= dimensions <= 4096:
            raise RequestError(
                400, "dimensions must be a whole number from 1 to 4096", "dimensions"
            )
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise RequestError(400, "encoding_format must be float or base64", "encoding_format")
        data = []
        for index, text in enumerate(texts):
            vector: Any = embedding(text, dimensions)
            if encoding == "base64":
                # The official client asks for base64: little-endian float32, as OpenAI sends it.
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        prompt_tokens = sum(count_tokens(t) for t in texts)
        self.server.metrics.enter()
        self.server.metrics.leave(prompt_tokens)
        reply = {"object": "list", "data": data, "model": self.server.model}
        reply["usage"] = usage(prompt_tokens, None)
        self.send_json(200, reply)

    def responses_api(self, body: dict[str, Any]) -> None:
        prompt = body.get("input")
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        words, _ = reply_words(self.server.model, text, max_tokens_of(body))
        reply = {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": int(time.time()),
            "model": self.server.model,
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": " ".join(words), "annotations": []}
                    ],
                }
            ],
            "usage": {
                "input_tokens": count_tokens(text),
                "output_tokens": len(words),
                "total_tokens": count_tokens(text) + len(words),
            },
        }
        if body.get("stream"):
            self.stream(response_events(reply, words), done=False)
        else:
            self.send_json(200, reply)

    def tokenize(self, body: dict[str, Any]) -> None:
        """vLLM's /tokenize: the tokens of a prompt, or of chat messages as the chat route
        counts them."""
        messages = body.get("messages")
        if isinstance(messages, list):
            texts = [message_text(m.get("content")) for m in messages if isinstance(m, dict)]
        elif isinstance(body.get("prompt"), str):
            texts = [body["prompt"]]
        else:
            raise RequestError(400, "send a prompt or messages", "prompt")
        count = sum(count_tokens(t) for t in texts)
        self.server.events.append(f"tokenize: {count}")
        reply = {"count": count, "max_model_len": self.server.max_model_len}
        self.send_json(200, {**reply, "tokens": list(range(count)), "token_strs": None})

    def score(self, body: dict[str, Any]) -> None:
        first, second = body.get("text_1"), body.get("text_2")
        seconds = second if isinstance(second, list) else [second]
        if not isinstance(first, str) or not all(isinstance(t, str) for t in seconds):
            raise RequestError(400, "text_1 and text_2 must be strings", "text_1")
        data = [
            {"index": i, "object": "score", "score": similarity(first, t)}
            for i, t in enumerate(seconds)
        ]
        tokens = count_tokens(first) + sum(count_tokens(t) for t in seconds)
        reply = {
            "id": f"score-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": self.server.model,
            "data": data,
            # vLLM's UsageInfo, dumped whole.
            "usage": {
                "prompt_tokens": tokens,
                "total_tokens": tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        }
        self.send_json(200, reply)

    def rerank(self, body: dict[str, Any]) -> None:
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list):
            raise RequestError(400, "query must be a string and documents a list", "documents")
        ranked = sorted(
            (
                {
                    "index": i,
                    "document": {"text": d, "multi_modal": None},
                    "relevance_score": similarity(query, str(d)),
                }
                for i, d in enumerate(documents)
            ),
            key=lambda r: -r["relevance_score"],
        )
        top = body.get("top_n")
        if isinstance(top, int) and top > 0:
            ranked = ranked[:top]
        tokens = count_tokens(query) + sum(count_tokens(str(d)) for d in documents)
        self.send_json(
            200,
            {
                "id": f"rerank-{uuid.uuid4().hex}",
                "model": self.server.model,
                "results": ranked,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def transcribe(self, raw: bytes) -> None:
        """The parakeet runtime's transcription: locale codes, JSON with optional timings."""
        fields = self.form_fields(raw)
        if fields is None:
            raise RequestError(400, "send multipart/form-data")
        if "file" not in fields:
            raise RequestError(400, "file is required", "file")
        locale = (fields.get("language") or b"en-US").decode()
        if locale not in PARAKEET_LOCALES:
            raise RequestError(400, f"language {locale} is not a supported locale", "language")
        unknown = sorted(set(fields) - {"file", "language", "timestamps"})
        if unknown:
            raise RequestError(400, f"unknown fields: {', '.join(unknown)}", unknown[0])
        try:
            words = fields["file"].decode().split()
        except UnicodeDecodeError:
            words = ["(inaudible)"]
        timed = [{"word": w, "start": i * 0.5, "end": i * 0.5 + 0.4} for i, w in enumerate(words)]
        reply: dict[str, Any] = {
            "text": " ".join(words),
            "language": locale,
            "duration": len(words) * 0.5,
        }
        if fields.get("timestamps") == b"true":
            reply["words"] = timed
            reply["segments"] = [
                {
                    "start": group[0]["start"],
                    "end": group[-1]["end"],
                    "text": " ".join(w["word"] for w in group),
                }
                for group in (timed[i : i + 5] for i in range(0, len(timed), 5))
            ]
        self.send_json(200, reply)


# --- infinity-emb 0.0.78 (infinity_emb/infinity_server.py, fastapi_schemas/pymodels.py) ----------

INFINITY_MAX_ITEMS = 2048  # INFINITY_MAX_CLIENT_BATCH_SIZE's default


def fastapi_invalid(handler: Handler, field: str, message: str) -> None:
    """FastAPI's answer to a body its pydantic model refuses."""
    detail = [{"type": "value_error", "loc": ["body", field], "msg": message, "input": None}]
    handler.send_json(422, {"detail": detail})


def infinity_error(handler: Handler, status: int, message: str) -> None:
    """infinity's OpenAIException: OpenAI's shape, type and param null, code the status."""
    body = {"error": {"message": message, "type": None, "param": None, "code": status}}
    handler.send_json(status, body)


def infinity_get(handler: Handler, path: str) -> None:
    model = handler.server.model
    if path == "/health":
        handler.send_json(200, {"unix": time.time()})
    elif path == "/v1/models":
        card = {
            "id": model,
            "stats": {},
            "object": "model",
            "owned_by": "infinity",
            "created": handler.server.created,
            "backend": "torch",
            "capabilities": ["embed", "rerank"],
        }
        handler.send_json(200, {"data": [card], "object": "list"})
    else:
        handler.send_json(404, {"detail": "Not Found"})


def infinity_texts(value: Any) -> list[str] | None:
    """A string or 1..2048 strings, stripped as its INPUT_STRING does; None when refused."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not 1 <= len(texts) <= INFINITY_MAX_ITEMS:
        return None
    if not all(isinstance(t, str) for t in texts):
        return None
    return [t.strip() for t in texts]


def infinity_post(handler: Handler, path: str, raw: bytes) -> None:
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        handler.send_json(422, {"detail": [{"type": "json_invalid", "loc": ["body", 0]}]})
        return
    if path not in ("/v1/embeddings", "/v1/rerank"):
        handler.send_json(404, {"detail": "Not Found"})
        return
    if not isinstance(body, dict):
        fastapi_invalid(handler, "body", "Input should be a valid dictionary")
        return
    model = handler.server.model
    if body.get("model", "default/not-specified") != model:
        infinity_error(handler, 400, f"Invalid model: {body.get('model')}")
        return
    handler.server.events.append("fields: " + ",".join(sorted(body)))
    if path == "/v1/embeddings":
        infinity_embeddings(handler, body)
    else:
        infinity_rerank(handler, body)


def infinity_embeddings(handler: Handler, body: dict[str, Any]) -> None:
    if body.get("modality", "text") != "text":
        infinity_error(handler, 400, "the stand-in embeds text only")
        return
    texts = infinity_texts(body.get("input"))
    if texts is None:
        fastapi_invalid(handler, "input", "Input should be a valid string or list of strings")
        return
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        fastapi_invalid(handler, "encoding_format", "Input should be 'float' or 'base64'")
        return
    dimensions = body.get("dimensions", 0)
    if not isinstance(dimensions, int) or isinstance(dimensions, bool):
        fastapi_invalid(handler, "dimensions", "Input should be a valid integer")
        return
    vectors = [embedding(t) for t in texts]
    if dimensions:
        if not 1 <= dimensions <= EMBEDDING_DIMENSIONS:
            infinity_error(
                handler,
                400,
                f"<class 'infinity_emb.primitives.MatryoshkaDimError'> -> matryoshka_dim="
                f"{dimensions} is not in a valid range. Select between 1 and "
                f"{EMBEDDING_DIMENSIONS}.",
            )
            return
        vectors = [v[:dimensions] for v in vectors]  # cut, not normalised again
    data = []
    for index, vector in enumerate(vectors):
        out: Any = vector
        if encoding == "base64":
            out = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "embedding": out, "index": index})
    tokens = sum(count_tokens(t) for t in texts)
    handler.send_json(
        200,
        {
            "object": "list",
            "data": data,
            "model": handler.server.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "id": f"infinity-{uuid.uuid4()}",
            "created": int(time.time()),
        },
    )


def infinity_rerank(handler: Handler, body: dict[str, Any]) -> None:
    query = body.get("query")
    if not isinstance(query, str):
        fastapi_invalid(handler, "query", "Input should be a valid string")
        return
    documents = body.get("documents")
    docs = infinity_texts(documents) if isinstance(documents, list) else None
    if docs is None:
        fastapi_invalid(handler, "documents", "Input should be a valid list of strings")
        return
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or top_n <= 0):
        fastapi_invalid(handler, "top_n", "Input should be greater than 0")
        return
    raw_scores = body.get("raw_scores", False) is True
    scores = [similarity(query.strip(), d) for d in docs]
    if raw_scores:  # before the sigmoid: a logit
        scores = [round(10 * s - 5, 6) for s in scores]
    results = sorted(range(len(docs)), key=lambda i: -scores[i])
    if top_n:
        results = results[:top_n]
    with_documents = body.get("return_documents", False) is True
    tokens = count_tokens(query) + sum(count_tokens(d) for d in docs)
    handler.send_json(
        200,
        {
            "object": "rerank",
            "results": [
                {
                    "relevance_score": scores[i],
                    "index": i,
                    "document": docs[i] if with_documents else None,
                }
                for i in results
            ],
            "model": handler.server.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "id": f"infinity-{uuid.uuid4()}",
            "created": int(time.time()),
        },
    )


# --- faster-whisper-server 0.0.3 (faster_whisper_server/api.py, models.py) ---------------------

_CODES = (
    "af am ar as az ba be bg bn bo br bs ca cs cy da de el en es et eu fa fi fo fr gl gu ha haw "
    "he hi hr ht hu hy id is it ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr ms mt "
    "my ne nl nn no oc pa pl ps pt ro ru sa sd si sk sl sn so sq sr su sv sw ta te tg th tk tl "
    "tr tt uk ur uz vi yi yo zh yue"
)
WHISPER_CODES = frozenset(_CODES.split())


def whisper_post(handler: Handler, path: str, raw: bytes) -> None:
    if path not in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        handler.send_json(404, {"detail": "Not Found"})
        return
    fields = handler.form_fields(raw) or {}
    handler.server.events.append("fields: " + ",".join(sorted(fields)))
    if "file" not in fields:
        detail = [{"type": "missing", "loc": ["body", "file"], "msg": "Field required"}]
        handler.send_json(422, {"detail": detail})
        return
    translate = path.endswith("translations")
    temperature = fields.get("temperature")
    if temperature is not None:
        try:
            float(temperature)
        except ValueError:
            detail = [{"type": "float_parsing", "loc": ["body", "temperature"], "msg": "bad"}]
            handler.send_json(422, {"detail": detail})
            return
    fmt = (fields.get("response_format") or b"json").decode()
    if fmt not in ("json", "verbose_json"):
        error = {"message": f"Unsupported response_format: {fmt}", "type": "invalid_request_error"}
        handler.send_json(400, {"detail": {"error": error}})
        return
    language = None if translate else (fields.get("language") or b"").decode() or None
    if language is not None and language not in WHISPER_CODES:
        # faster-whisper raises ValueError, which the server does not catch.
        handler.send_text(500, "Internal Server Error", "text/plain; charset=utf-8")
        return
    try:
        words = fields["file"].decode().split()
    except UnicodeDecodeError:
        words = ["(inaudible)"]
    groups = [words[i : i + 5] for i in range(0, len(words), 5)]
    segments = [
        {
            "id": n,
            "start": n * 2.5,
            "end": n * 2.5 + len(group) * 0.5 - 0.1,
            "text": " " + " ".join(group),  # Whisper's segments start with a space
            "tokens": [50364 + k for k in range(len(group))],
            "temperature": 0.0,
            "avg_logprob": -0.25,
            "compression_ratio": 1.1,
            "no_speech_prob": 0.01,
        }
        for n, group in enumerate(groups)
    ]
    text = "".join(s["text"] for s in segments)
    if fmt == "json":
        handler.send_json(200, {"text": text})
        return
    handler.send_json(
        200,
        {
            "task": "translate" if translate else "transcribe",
            "language": language or "en",
            "duration": len(words) * 0.5,
            "text": text,
            "segments": segments,
        },
    )


PARAKEET_LOCALES = {
    "bg-BG",
    "cs-CZ",
    "da-DK",
    "de-DE",
    "el-GR",
    "en-US",
    "es-ES",
    "et-EE",
    "fi-FI",
    "fr-FR",
    "hr-HR",
    "hu-HU",
    "it-IT",
    "lt-LT",
    "lv-LV",
    "mt-MT",
    "nl-NL",
    "pl-PL",
    "pt-PT",
    "ro-RO",
    "ru-RU",
    "sk-SK",
    "sl-SI",
    "sv-SE",
    "uk-UA",
}


def similarity(a: str, b: str) -> float:
    """Shared words over all words: 1.0 for equal texts, deterministic."""
    left, right = set(a.lower().split()), set(b.lower().split())
    return round(len(left & right) / max(len(left | right), 1), 6)


def embedding_inputs(value: Any) -> list[str]:
    """input as OpenAI accepts it: a string, strings, token ids, or lists of token ids."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if all(isinstance(v, int) for v in value):
            return [" ".join(map(str, value))]
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return [" ".join(map(str, v)) for v in value]
    raise RequestError(400, "input must be a string, a list of strings or token ids", "input")


def usage_asked(body: dict[str, Any]) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) as vLLM reads stream_options: running usage on
    every chunk only together with the final usage chunk."""
    options = body.get("stream_options") or {}
    include = bool(options.get("include_usage"))
    return include, include and bool(options.get("continuous_usage_stats"))


def chat_chunks(
    base: dict[str, Any],
    words: list[str],
    finish: str,
    n: int,
    prompt_tokens: int,
    include_usage: bool,
    running: bool = False,
) -> Any:
    """chat.completion.chunk events: the role first, a word per chunk, then finish_reason; with
    `running` (vLLM's continuous_usage_stats) each carries the usage of its choice so far."""
    chunk = {"object": "chat.completion.chunk", **base}

    def event(index: int, delta: dict[str, Any], finish_reason: str | None, made: int) -> dict:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        out = {**chunk, "choices": [choice]}
        if running:
            out["usage"] = usage(prompt_tokens, made)
        return out

    for index in range(n):
        yield event(index, {"role": "assistant", "content": ""}, None, 0)
        for position, word in enumerate(words):
            text = word if position == 0 else " " + word
            yield event(index, {"content": text}, None, position + 1)
        yield event(index, {}, finish, len(words))
    if include_usage:
        yield {**chunk, "choices": [], "usage": usage(prompt_tokens, len(words) * n)}


def completion_chunks(
    base: dict[str, Any],
    answers: list[tuple[list[str], str]],
    prompt_counts: list[int],
    include_usage: bool,
    running: bool = False,
) -> Any:
    """text_completion events, one answer per prompt; with `running` each carries its prompt's
    tokens and its answer's so far, as vLLM's continuous usage does."""
    chunk = {"object": "text_completion", **base}
    for index, (words, finish) in enumerate(answers):
        prompt = prompt_counts[index]
        for position, word in enumerate(words):
            text = word if position == 0 else " " + word
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": None}
            out = {**chunk, "choices": [choice]}
            if running:
                out["usage"] = usage(prompt, position + 1)
            yield out
        out = {**chunk, "choices": [{"index": index, "text": "", "finish_reason": finish}]}
        if running:
            out["usage"] = usage(prompt, len(words))
        yield out
    if include_usage:
        generated = sum(len(words) for words, _ in answers)
        yield {**chunk, "choices": [], "usage": usage(sum(prompt_counts), generated)}


def response_events(reply: dict[str, Any], words: list[str]) -> Any:
    """The Responses API's stream as vLLM sends it: (event type, payload) pairs, a delta per
    word, usage only in response.completed."""
    item = reply["output"][0]
    started = {**reply, "status": "in_progress", "output": [], "usage": None}
    yield "response.created", {"type": "response.created", "response": started}
    yield "response.in_progress", {"type": "response.in_progress", "response": started}
    empty_item = {**item, "status": "in_progress", "content": []}
    yield (
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": 0, "item": empty_item},
    )
    part = {"type": "output_text", "text": "", "annotations": []}
    place = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    yield (
        "response.content_part.added",
        {"type": "response.content_part.added", **place, "part": part},
    )
    for position, word in enumerate(words):
        delta = word if position == 0 else " " + word
        yield (
            "response.output_text.delta",
            {"type": "response.output_text.delta", **place, "delta": delta},
        )
    text = " ".join(words)
    yield "response.output_text.done", {"type": "response.output_text.done", **place, "text": text}
    done_part = {**part, "text": text}
    yield (
        "response.content_part.done",
        {"type": "response.content_part.done", **place, "part": done_part},
    )
    yield (
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    )
    yield "response.completed", {"type": "response.completed", "response": reply}


# --- process lifecycle -------------------------------------------------------------------------


def crash_later(seconds: float) -> None:
    def crash() -> None:
        time.sleep(seconds)
        log("ERROR:    simulated crash: the engine core died unexpectedly")
        sys.stdout.flush()
        os._exit(CRASH_EXIT_CODE)

    threading.Thread(target=crash, daemon=True).start()


def spawn_worker() -> None:
    """A child in the server's process group that ignores SIGTERM and is never waited for:
    only stopping the whole group (SIGKILL at the end) removes it."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    worker = subprocess.Popen([sys.executable, "-c", code])
    log(f"INFO:     worker pid {worker.pid}")


def main(argv: list[str]) -> int:
    args, engine_args = parse_args(argv)
    name = args.served_model_name
    log(f"INFO:     stand-in model server for {name}, pid {os.getpid()}")
    log(f"INFO:     engine arguments: {json.dumps(engine_args)}")
    log(f"INFO:     CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}")
    server: ModelServer | None = None

    def on_sigterm(signum: int, frame: Any) -> None:
        log("INFO:     SIGTERM received, shutting down")
        if server is None:
            raise SystemExit(0)
        # shutdown() waits for serve_forever, which runs in this (the main) thread.
        threading.Thread(target=server.shutdown).start()

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, on_sigterm)
    if args.startup_delay:
        log(f"INFO:     loading weights for {args.startup_delay} s")
        time.sleep(args.startup_delay)
    if args.fail_on_start:
        log("ERROR:    simulated start failure: no weights found for the model")
        return START_FAILURE_EXIT_CODE
    server = ModelServer(args.port, args, engine_args)
    log(f"INFO:     Uvicorn running on http://{LOOPBACK}:{args.port} (Press CTRL+C to quit)")
    if args.crash_after is not None:
        crash_later(args.crash_after)
    if args.spawn_worker:
        spawn_worker()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    log("INFO:     stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
