"""A benchmark's synthetic inputs: prompts of a given length in the model's own tokens, and a
short generated tone for speech to text. Pure: the tokenizer is a count the caller gives.

A prompt is common English words drawn from a seeded generator, different per request (so no
prefix cache answers for the model) and the same on every run (so revisions are compared on
the same text). Its length is fitted with the model's tokenizer (vLLM's POST /tokenize) where
the console can reach it; elsewhere it is estimated at four bytes of text per token, as the
gateway's meter estimates a prompt, and the result says which.
"""

from __future__ import annotations

import io
import math
import random
import struct
import wave

TOKENIZER, ESTIMATE, AUDIO = "tokenizer", "estimate", "audio"
BYTES_PER_TOKEN = 4  # as jobs.gateway.prompt estimates
MAX_FITS = 4  # calls to the tokenizer, at most, to size a prompt

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education river garden light music table window paper village bridge market letter"
)
WORDS = tuple(_WORD_TEXT.split())


def prompt_text(index: int, words: int) -> str:
    """Request `index`'s prompt of `words` words (the same for the same arguments)."""
    chooser = random.Random(index)  # noqa: S311 - synthetic text, not a secret
    body = " ".join(chooser.choice(WORDS) for _ in range(max(words - 1, 0)))
    return f"Request {index}: {body}".strip()


def estimated_words(tokens: int) -> int:
    """How many words make about `tokens` tokens at four bytes per token (no tokenizer)."""
    mean = sum(len(w) + 1 for w in WORDS) / len(WORDS)
    return max(1, round(tokens * BYTES_PER_TOKEN / mean))


def next_guess(target: int, words: int, counted: int) -> int:
    """The next word count to try when `words` words counted `counted` tokens."""
    if counted <= 0:
        return words * 2
    return max(1, round(words * target / counted))


def wav_tone(seconds: int = 3, rate: int = 16_000) -> bytes:
    """A mono 16-bit WAV: a 440 Hz tone rising and falling in loudness, which a speech
    model transcribes as little or nothing (what is timed is the work, not the words)."""
    frames = bytearray()
    for i in range(seconds * rate):
        envelope = 0.5 - 0.5 * math.cos(2 * math.pi * i / rate)
        value = int(8000 * envelope * math.sin(2 * math.pi * 440 * i / rate))
        frames += struct.pack("<h", value)
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(bytes(frames))
    return out.getvalue()
