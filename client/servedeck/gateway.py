"""Calling a model through the console's OpenAI-compatible gateway (`/v1`) with an API key:
chat and completions streamed as they arrive, embeddings, transcriptions. The official
`openai` client does the talking; errors come back in the gateway's own words."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import openai

from servedeck.console import Failed, Unreachable, redirected
from servedeck.present import terminal_safe

T = TypeVar("T")
MAX_AUDIO_BYTES = 32 << 20  # the gateway's own limit on an audio body


class Gateway:
    def __init__(self, base_url: str, api_key: str, timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key,
            max_retries=0,
            timeout=timeout,
            # The API key must not follow a redirect: a 3xx comes back as an error instead.
            http_client=openai.DefaultHttpxClient(follow_redirects=False),
        )

    def _call(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except openai.APIConnectionError as error:
            raise Unreachable(
                f"cannot reach the gateway at {self.base_url} "
                f"({error.__cause__ or error}); check that the console is running."
            ) from None
        except openai.APIStatusError as error:
            raise gateway_failure(error) from None

    def _stream(self, make: Callable[[], Any], text_of: Callable[[Any], str]) -> Iterator[str]:
        """The text of each chunk as it arrives."""
        stream = self._call(make)
        try:
            for chunk in stream:
                text = text_of(chunk)
                if text:
                    yield text
        except openai.APIConnectionError as error:
            raise Unreachable(
                f"the gateway's stream broke off ({error.__cause__ or error})."
            ) from None
        except openai.APIError as error:  # an error event inside a stream that began
            raise Failed(f"the model server failed mid-answer: {error.message}") from None
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def chat(self, model: str, messages: list[dict], **options: Any) -> Iterator[str]:
        def text_of(chunk):
            if not chunk.choices:
                return ""
            return chunk.choices[0].delta.content or ""

        return self._stream(
            lambda: self.client.chat.completions.create(
                model=model, messages=messages, stream=True, **options
            ),
            text_of,
        )

    def complete(self, model: str, prompt: str, **options: Any) -> Iterator[str]:
        return self._stream(
            lambda: self.client.completions.create(
                model=model, prompt=prompt, stream=True, **options
            ),
            lambda chunk: chunk.choices[0].text if chunk.choices else "",
        )

    def embed(self, model: str, texts: list[str]) -> list[list[float]]:
        answer = self._call(lambda: self.client.embeddings.create(model=model, input=texts))
        return [item.embedding for item in sorted(answer.data, key=lambda d: d.index)]

    def transcribe(
        self, model: str, path: Path, language: str | None, response_format: str
    ) -> str | dict:
        try:
            size = path.stat().st_size
            handle: IO[bytes] = path.open("rb")
        except OSError as error:
            raise Failed(f"FILE {path}: cannot read it ({error.strerror}).") from None
        if size > MAX_AUDIO_BYTES:
            handle.close()
            raise Failed(
                f"FILE {path}: {size} bytes; the gateway accepts audio up to "
                f"{MAX_AUDIO_BYTES >> 20} MiB. Send a shorter recording."
            )
        options: dict[str, Any] = {"response_format": response_format}
        if language:
            options["language"] = language
        with handle:
            answer = self._call(
                lambda: self.client.audio.transcriptions.create(
                    model=model, file=(path.name, handle), **options
                )
            )
        if isinstance(answer, str):
            return answer
        if response_format == "verbose_json":
            return answer.model_dump(exclude_none=True)
        return getattr(answer, "text", "") or ""


def gateway_failure(error: openai.APIStatusError) -> Failed:
    """The gateway's OpenAI-shaped error as the client says it; a redirect, refused."""
    if 300 <= error.status_code < 400:
        return redirected(
            "gateway",
            error.status_code,
            error.response.headers.get("Location"),
            "set SERVEDECK_GATEWAY_URL (or log in) with the address it redirects to",
        )
    body = error.body if isinstance(error.body, dict) else {}
    message = str(body.get("message") or error.message)
    where = f" ({body['param']})" if body.get("param") else ""
    retry = error.response.headers.get("Retry-After") if error.response is not None else None
    after = f" Retry after {retry} s." if retry else ""
    if error.status_code == 401:
        after += " Check the API key (--key or SERVEDECK_API_KEY)."
    return Failed(f"{message}{where}{after}", status=error.status_code)


def write_stream(pieces: Iterator[str], out: IO[str] | None = None) -> str:
    """Print each piece the moment it arrives, made safe for the terminal (a prompt may steer
    a model into writing escape sequences); the whole text, as the model wrote it, is
    returned (a session sends it back as history)."""
    out = out or sys.stdout
    seen = []
    for piece in pieces:
        out.write(terminal_safe(piece))
        out.flush()
        seen.append(piece)
    out.write("\n")
    out.flush()
    return "".join(seen)
