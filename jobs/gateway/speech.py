"""OpenAI's transcription API on the client's side, the speech runtimes' on the model's: the
parakeet runtime's and faster-whisper-server's (pure: bytes and dicts in, bytes and dicts out).

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
_HEADER_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is allowed


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
            if _HEADER_CONTROL.search(line):
                # Passed on, a bare CR or LF would start a header line of our own request.
                raise GatewayError(
                    400,
                    "The multipart body is malformed: a part's header holds a control "
                    "character (a bare CR or LF, or NUL); send each header on its own CRLF line.",
                )
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
    task: str = "transcribe"  # or "translate"


def _openai_fields(parts: list[Part], runtime: str, words: bool) -> tuple[Part, Wanted]:
    """The audio and what is asked of it, checked as OpenAI documents the fields (a 400 naming
    the field otherwise); `words` says whether the runtime gives word timings."""
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
    if "word" in granularities and not words:
        raise GatewayError(
            400,
            f"timestamp_granularities: the {runtime} runtime gives segment timings only, not "
            "word timings; ask for segment.",
            "timestamp_granularities",
        )
    if (field_text(parts, "stream") or "false").lower() == "true":
        raise GatewayError(
            400,
            f"stream: the {runtime} runtime does not stream transcriptions; send stream=false.",
            "stream",
        )
    language = field_text(parts, "language") or None
    return audio[0], Wanted(
        fmt, granularities or ("segment",), language.lower() if language else None
    )


def _language_code(wanted: Wanted, accepted: dict[str, Any]) -> str | None:
    code = wanted.language
    if code is not None and code not in accepted:
        raise GatewayError(
            400,
            f"language: {bounded(code, 20)!r} is not an ISO-639-1 code this model "
            f"transcribes; accepts {', '.join(sorted(accepted))}.",
            "language",
        )
    return code


def for_parakeet(parts: list[Part], translation: bool = False) -> tuple[list[Part], Wanted]:
    """The parakeet runtime's request for an OpenAI transcription request (or a 400 naming the
    field)."""
    if translation:
        raise GatewayError(
            400,
            "The parakeet speech-to-text runtime transcribes in the spoken language and does not "
            "translate: call /v1/audio/transcriptions instead (or serve a Whisper model with vLLM "
            "for /v1/audio/translations).",
        )
    audio, wanted = _openai_fields(parts, "parakeet", words=True)
    code = _language_code(wanted, LANGUAGES)
    out = [Part("file", audio.data, audio.filename, audio.content_type)]
    if code is not None:
        out.append(Part("language", LANGUAGES[code][0].encode()))
    if wanted.response_format in ("srt", "vtt", "verbose_json"):
        out.append(Part("timestamps", b"true"))
    return out, wanted


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _clock(seconds: float, separator: str) -> str:
    millis = int(round(max(seconds, 0.0) * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


# Segment fields OpenAI's verbose_json carries, with what they are when a runtime says nothing.
SEGMENT_DEFAULTS: dict[str, Any] = {
    "seek": 0,
    "tokens": [],
    "temperature": 0.0,
    "avg_logprob": 0.0,
    "compression_ratio": 0.0,
    "no_speech_prob": 0.0,
}


def _segments(answer: dict[str, Any]) -> list[dict[str, Any]]:
    raw = answer.get("segments")
    out = []
    for seg in raw if isinstance(raw, list) else []:
        if isinstance(seg, dict):
            extra = {}
            for name, default in SEGMENT_DEFAULTS.items():
                value = seg.get(name)
                if name == "tokens":
                    ok = isinstance(value, list) and all(type(t) is int for t in value)
                else:
                    ok = isinstance(value, int | float) and not isinstance(value, bool)
                extra[name] = value if ok else default
            out.append(
                {
                    "start": _number(seg.get("start")),
                    "end": _number(seg.get("end")),
                    "text": str(seg.get("text") or "").strip(),
                    **extra,
                }
            )
    return out


def _render(answer: Any, wanted: Wanted, language: str, runtime: str) -> tuple[bytes, bytes]:
    """(content type, body) of the OpenAI answer in the format asked, from a runtime's JSON
    transcript: `text`, `segments` [{start, end, text, ...}], `words`, `duration`;
    `language` is the language's name as OpenAI's verbose_json says it."""
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise GatewayError(502, f"The {runtime} runtime answered without a transcript.")
    text = answer["text"].strip()
    fmt = wanted.response_format
    if fmt == "json":
        return b"application/json", json.dumps({"text": text}).encode()
    if fmt == "text":
        return b"text/plain; charset=utf-8", (text + "\n").encode()
    segments = _segments(answer)
    if fmt in ("srt", "vtt") and not segments and text:
        raise GatewayError(
            502, f"The {runtime} runtime sent no timestamps, so no {fmt} can be built."
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
    verbose: dict[str, Any] = {
        "task": wanted.task,
        "language": language,
        "duration": _number(answer.get("duration")),
        "text": text,
    }
    if "segment" in wanted.granularities:
        verbose["segments"] = [
            {
                "id": i,
                "seek": s["seek"],
                "start": s["start"],
                "end": s["end"],
                "text": s["text"],
                "tokens": s["tokens"],
                "temperature": s["temperature"],
                "avg_logprob": s["avg_logprob"],
                "compression_ratio": s["compression_ratio"],
                "no_speech_prob": s["no_speech_prob"],
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


def from_parakeet(answer: Any, wanted: Wanted) -> tuple[bytes, bytes]:
    """(content type, body) of the OpenAI answer built from the parakeet runtime's answer."""
    locale = str(answer.get("language") or "").lower() if isinstance(answer, dict) else ""
    code = wanted.language or LOCALES.get(locale) or locale.split("-")[0]
    name = LANGUAGES[code][1] if code in LANGUAGES else code
    return _render(answer, wanted, name, "speech-to-text")


# --- faster-whisper-server 0.0.3 ---------------------------------------------------------------
#
# POST /v1/audio/transcriptions and /v1/audio/translations, multipart/form-data with
#     file, model_name (not OpenAI's `model`; one model per server, so it picks nothing),
#     language (transcriptions only: a Whisper language code), prompt, temperature (a float),
#     response_format json | verbose_json (anything else is its 400).
# -> json {"text"}; verbose_json {"task", "language": "<code>", "duration", "text",
#    "segments": [{"id", "start", "end", "text", "tokens", "temperature", "avg_logprob",
#    "compression_ratio", "no_speech_prob"}]}: no words, no `seek`.
# Its errors are FastAPI's {"detail": ...}; it has no /v1/models (readiness is GET /health).
# The gateway asks it for verbose_json whenever timings are needed and builds text, srt and
# vtt itself; word timings and streaming are refused.

WHISPER_SERVER = "faster-whisper-server"
# Whisper's language codes (faster-whisper's tokenizer) and their names in OpenAI's words.
WHISPER_LANGUAGES = {
    "af": "afrikaans", "am": "amharic", "ar": "arabic", "as": "assamese", "az": "azerbaijani",
    "ba": "bashkir", "be": "belarusian", "bg": "bulgarian", "bn": "bengali", "bo": "tibetan",
    "br": "breton", "bs": "bosnian", "ca": "catalan", "cs": "czech", "cy": "welsh",
    "da": "danish", "de": "german", "el": "greek", "en": "english", "es": "spanish",
    "et": "estonian", "eu": "basque", "fa": "persian", "fi": "finnish", "fo": "faroese",
    "fr": "french", "gl": "galician", "gu": "gujarati", "ha": "hausa", "haw": "hawaiian",
    "he": "hebrew", "hi": "hindi", "hr": "croatian", "ht": "haitian creole",
    "hu": "hungarian", "hy": "armenian", "id": "indonesian", "is": "icelandic",
    "it": "italian", "ja": "japanese", "jw": "javanese", "ka": "georgian", "kk": "kazakh",
    "km": "khmer", "kn": "kannada", "ko": "korean", "la": "latin", "lb": "luxembourgish",
    "ln": "lingala", "lo": "lao", "lt": "lithuanian", "lv": "latvian", "mg": "malagasy",
    "mi": "maori", "mk": "macedonian", "ml": "malayalam", "mn": "mongolian", "mr": "marathi",
    "ms": "malay", "mt": "maltese", "my": "myanmar", "ne": "nepali", "nl": "dutch",
    "nn": "nynorsk", "no": "norwegian", "oc": "occitan", "pa": "punjabi", "pl": "polish",
    "ps": "pashto", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sa": "sanskrit",
    "sd": "sindhi", "si": "sinhala", "sk": "slovak", "sl": "slovenian", "sn": "shona",
    "so": "somali", "sq": "albanian", "sr": "serbian", "su": "sundanese", "sv": "swedish",
    "sw": "swahili", "ta": "tamil", "te": "telugu", "tg": "tajik", "th": "thai",
    "tk": "turkmen", "tl": "tagalog", "tr": "turkish", "tt": "tatar", "uk": "ukrainian",
    "ur": "urdu", "uz": "uzbek", "vi": "vietnamese", "yi": "yiddish", "yo": "yoruba",
    "zh": "chinese", "yue": "cantonese",
}  # fmt: skip


def _temperature(parts: list[Part]) -> bytes | None:
    raw = field_text(parts, "temperature")
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise GatewayError(
            400,
            f"temperature: {bounded(raw, 20)!r} is not a number from 0 to 1; send one, or "
            "leave it out.",
            "temperature",
        )
    return repr(value).encode()


def for_whisper_server(
    parts: list[Part], model: str, translation: bool = False
) -> tuple[list[Part], Wanted]:
    """faster-whisper-server's request for an OpenAI transcription (or translation) request,
    addressed to `model`; a 400 naming the field for what it cannot honour."""
    audio, wanted = _openai_fields(parts, WHISPER_SERVER, words=False)
    out = [
        Part("file", audio.data, audio.filename, audio.content_type),
        Part("model_name", model.encode()),
    ]
    if translation:
        if wanted.language is not None:
            raise GatewayError(
                400,
                "language: translations are always into English and take no language; drop it.",
                "language",
            )
        wanted = Wanted(wanted.response_format, wanted.granularities, None, "translate")
    code = _language_code(wanted, WHISPER_LANGUAGES)
    if code is not None:
        out.append(Part("language", code.encode()))
    prompt = field_text(parts, "prompt")
    if prompt:
        out.append(Part("prompt", prompt.encode()))
    temperature = _temperature(parts)
    if temperature is not None:
        out.append(Part("temperature", temperature))
    timed = wanted.response_format in ("srt", "vtt", "verbose_json")
    out.append(Part("response_format", b"verbose_json" if timed else b"json"))
    return out, wanted


def from_whisper_server(answer: Any, wanted: Wanted) -> tuple[bytes, bytes]:
    """(content type, body) of the OpenAI answer built from faster-whisper-server's."""
    code = str(answer.get("language") or "") if isinstance(answer, dict) else ""
    code = code.lower() or (wanted.language or "")
    return _render(answer, wanted, WHISPER_LANGUAGES.get(code, code), WHISPER_SERVER)
