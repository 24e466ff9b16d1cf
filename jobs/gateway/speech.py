"""OpenAI's transcription API on the client's side, the parakeet runtime's on the model's
(pure: bytes and dicts in, bytes and dicts out).

What ServeDeck's parakeet server (the `servedeck-parakeet` ServingRuntime) speaks:
    POST /v1/audio/transcriptions, multipart/form-data with
        file        the audio
        language    a locale of the 25 European languages parakeet-tdt-0.6b-v3 knows, "en-US"
        timestamps  "true" to get segment and word timings
    -> 200 application/json {"text", "language": "<locale>", "duration": seconds,
                             "segments": [{"start", "end", "text"}],
                             "words": [{"word", "start", "end"}]}   (timings with timestamps)
It answers JSON only, takes no prompt or temperature, does not stream and does not translate.

Where OpenAI differs, the gateway translates: ISO-639-1 `language` codes become locales;
`response_format` json, text, srt, vtt and verbose_json are built from the timings;
`timestamp_granularities[]` picks segments and words; anything it cannot honour is a clear 400.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .errors import GatewayError, bounded

# ISO-639-1 -> (the runtime's locale, the language's name as OpenAI's verbose_json says it)
LANGUAGES = {
    "bg": ("bg-BG", "bulgarian"),
    "cs": ("cs-CZ", "czech"),
    "da": ("da-DK", "danish"),
    "de": ("de-DE", "german"),
    "el": ("el-GR", "greek"),
    "en": ("en-US", "english"),
    "es": ("es-ES", "spanish"),
    "et": ("et-EE", "estonian"),
    "fi": ("fi-FI", "finnish"),
    "fr": ("fr-FR", "french"),
    "hr": ("hr-HR", "croatian"),
    "hu": ("hu-HU", "hungarian"),
    "it": ("it-IT", "italian"),
    "lt": ("lt-LT", "lithuanian"),
    "lv": ("lv-LV", "latvian"),
    "mt": ("mt-MT", "maltese"),
    "nl": ("nl-NL", "dutch"),
    "pl": ("pl-PL", "polish"),
    "pt": ("pt-PT", "portuguese"),
    "ro": ("ro-RO", "romanian"),
    "ru": ("ru-RU", "russian"),
    "sk": ("sk-SK", "slovak"),
    "sl": ("sl-SI", "slovenian"),
    "sv": ("sv-SE", "swedish"),
    "uk": ("uk-UA", "ukrainian"),
}
LOCALES = {locale.lower(): code for code, (locale, _) in LANGUAGES.items()}
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("segment", "word")
MAX_PARTS = 32
# Fields OpenAI defines that the runtime has no use for: accepted and not passed on.
IGNORED = frozenset({"prompt", "temperature", "chunking_strategy", "include[]", "include"})


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None


_DISPOSITION = re.compile(rb'(\w+)="([^"]*)"')


def boundary_of(content_type: str) -> str | None:
    match = re.search(r'boundary="?([^";,\s]{1,200})"?', content_type or "")
    return match.group(1) if match else None


def parse_multipart(body: bytes, boundary: str) -> list[Part]:
    """The parts of a multipart/form-data body (bounded in count); 400 when it is not one."""
    delimiter = b"--" + boundary.encode("latin-1")
    chunks = body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise GatewayError(400, "The multipart body is malformed: its closing boundary is missing.")
    if len(chunks) - 2 > MAX_PARTS:
        raise GatewayError(400, f"The multipart body has more than {MAX_PARTS} parts.")
    parts = []
    for chunk in chunks[1:-1]:
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep or not data.endswith(b"\r\n"):
            raise GatewayError(400, "The multipart body is malformed: a part has no headers.")
        name = filename = content_type = None
        for line in head.strip(b"\r\n").split(b"\r\n"):
            field, _, value = line.partition(b":")
            field = field.strip().lower()
            if field == b"content-disposition":
                params = dict(_DISPOSITION.findall(value))
                name = params.get(b"name")
                filename = params.get(b"filename")
            elif field == b"content-type":
                content_type = value.strip().decode("latin-1")
        if name is None:
            raise GatewayError(400, "The multipart body is malformed: a part has no name.")
        parts.append(
            Part(
                name.decode("utf-8", "replace"),
                data[:-2],
                filename.decode("utf-8", "replace") if filename is not None else None,
                content_type,
            )
        )
    return parts


def build_multipart(parts: list[Part]) -> tuple[bytes, str]:
    boundary = "servedeck" + secrets.token_hex(12)
    out = []
    for part in parts:
        disposition = f'form-data; name="{part.name}"'
        if part.filename is not None:
            safe = part.filename.replace('"', "'").replace("\r", " ").replace("\n", " ")
            disposition += f'; filename="{safe}"'
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if part.content_type:
            head += f"Content-Type: {part.content_type}\r\n"
        out.append(head.encode() + b"\r\n" + part.data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def field_text(parts: list[Part], name: str) -> str | None:
    for part in parts:
        if part.name == name and part.filename is None:
            return part.data.decode("utf-8", "replace").strip()
    return None


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the client asked for, to build the answer from the runtime's."""

    response_format: str
    granularities: tuple[str, ...]
    language: str | None  # ISO-639-1, as asked


def for_runtime(parts: list[Part], translation: bool = False) -> tuple[list[Part], Wanted]:
    """The runtime's request for an OpenAI transcription request (or a 400 naming the field)."""
    if translation:
        raise GatewayError(
            400,
            "The parakeet speech-to-text runtime transcribes in the spoken language and does not "
            "translate: call /v1/audio/transcriptions instead (or serve a Whisper model with vLLM "
            "for /v1/audio/translations).",
        )
    audio = [p for p in parts if p.name == "file"]
    if not audio or audio[0].filename is None:
        raise GatewayError(
            400, "file: missing; send the audio as the multipart field 'file'.", "file"
        )
    fmt = field_text(parts, "response_format") or "json"
    if fmt not in FORMATS:
        raise GatewayError(
            400,
            f"response_format: {bounded(fmt, 40)!r} is not one this model answers; accepts "
            f"{', '.join(FORMATS)}.",
            "response_format",
        )
    granularities = tuple(
        sorted(
            {
                p.data.decode("utf-8", "replace").strip()
                for p in parts
                if p.name in ("timestamp_granularities[]", "timestamp_granularities")
            }
        )
    )
    for g in granularities:
        if g not in GRANULARITIES:
            raise GatewayError(
                400,
                f"timestamp_granularities: {bounded(g, 40)!r} is unknown; accepts segment, word.",
                "timestamp_granularities",
            )
    if granularities and fmt != "verbose_json":
        raise GatewayError(
            400,
            "timestamp_granularities needs response_format verbose_json; set it, or drop the "
            "granularities.",
            "timestamp_granularities",
        )
    if (field_text(parts, "stream") or "false").lower() == "true":
        raise GatewayError(
            400,
            "stream: the parakeet runtime does not stream transcriptions; send stream=false.",
            "stream",
        )
    language = field_text(parts, "language") or None
    out = [Part("file", audio[0].data, audio[0].filename, audio[0].content_type)]
    if language is not None:
        code = language.lower()
        if code not in LANGUAGES:
            raise GatewayError(
                400,
                f"language: {bounded(language, 20)!r} is not an ISO-639-1 code this model "
                f"transcribes; accepts {', '.join(sorted(LANGUAGES))}.",
                "language",
            )
        out.append(Part("language", LANGUAGES[code][0].encode()))
    if fmt in ("srt", "vtt", "verbose_json"):
        out.append(Part("timestamps", b"true"))
    return out, Wanted(fmt, granularities or ("segment",), language.lower() if language else None)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _clock(seconds: float, separator: str) -> str:
    millis = int(round(max(seconds, 0.0) * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _segments(answer: dict[str, Any]) -> list[dict[str, Any]]:
    raw = answer.get("segments")
    out = []
    for seg in raw if isinstance(raw, list) else []:
        if isinstance(seg, dict):
            out.append(
                {
                    "start": _number(seg.get("start")),
                    "end": _number(seg.get("end")),
                    "text": str(seg.get("text") or "").strip(),
                }
            )
    return out


def from_runtime(answer: Any, wanted: Wanted) -> tuple[bytes, bytes]:
    """(content type, body) of the OpenAI answer built from the runtime's JSON answer."""
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise GatewayError(502, "The speech-to-text runtime answered without a transcript.")
    text = answer["text"].strip()
    fmt = wanted.response_format
    if fmt == "json":
        return b"application/json", json.dumps({"text": text}).encode()
    if fmt == "text":
        return b"text/plain; charset=utf-8", (text + "\n").encode()
    segments = _segments(answer)
    if fmt in ("srt", "vtt") and not segments and text:
        raise GatewayError(
            502, f"The speech-to-text runtime sent no timestamps, so no {fmt} can be built."
        )
    if fmt == "srt":
        blocks = [
            f"{i}\n{_clock(s['start'], ',')} --> {_clock(s['end'], ',')}\n{s['text']}\n"
            for i, s in enumerate(segments, 1)
        ]
        return b"application/x-subrip; charset=utf-8", "\n".join(blocks).encode()
    if fmt == "vtt":
        blocks = [
            f"{_clock(s['start'], '.')} --> {_clock(s['end'], '.')}\n{s['text']}\n"
            for s in segments
        ]
        return b"text/vtt; charset=utf-8", ("WEBVTT\n\n" + "\n".join(blocks)).encode()
    locale = str(answer.get("language") or "").lower()
    code = wanted.language or LOCALES.get(locale) or locale.split("-")[0]
    verbose: dict[str, Any] = {
        "task": "transcribe",
        "language": LANGUAGES[code][1] if code in LANGUAGES else code,
        "duration": _number(answer.get("duration")),
        "text": text,
    }
    if "segment" in wanted.granularities:
        verbose["segments"] = [
            {
                "id": i,
                "seek": 0,
                "start": s["start"],
                "end": s["end"],
                "text": s["text"],
                "tokens": [],
                "temperature": 0.0,
                "avg_logprob": 0.0,
                "compression_ratio": 0.0,
                "no_speech_prob": 0.0,
            }
            for i, s in enumerate(segments)
        ]
    if "word" in wanted.granularities:
        words = answer.get("words")
        verbose["words"] = [
            {
                "word": str(w.get("word") or ""),
                "start": _number(w.get("start")),
                "end": _number(w.get("end")),
            }
            for w in (words if isinstance(words, list) else [])
            if isinstance(w, dict)
        ]
    return b"application/json", json.dumps(verbose).encode()
