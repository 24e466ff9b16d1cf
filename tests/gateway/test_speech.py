"""The translation between OpenAI's transcription API and the speech runtimes' (parakeet's;
faster-whisper-server's), as tables."""

import json

import pytest

from jobs.gateway import speech
from jobs.gateway.errors import GatewayError

AUDIO = speech.Part("file", b"RIFF....", "a.wav", "audio/wav")


def fields(**values):
    return [AUDIO, *(speech.Part(k.replace("__", "[]"), v.encode()) for k, v in values.items())]


@pytest.mark.parametrize(
    ("given", "sent", "fmt"),
    [
        ({}, {}, "json"),
        ({"language": "en"}, {"language": b"en-US"}, "json"),
        ({"language": "DE"}, {"language": b"de-DE"}, "json"),
        ({"language": "uk", "response_format": "text"}, {"language": b"uk-UA"}, "text"),
        ({"response_format": "srt"}, {"timestamps": b"true"}, "srt"),
        ({"response_format": "vtt"}, {"timestamps": b"true"}, "vtt"),
        ({"response_format": "verbose_json"}, {"timestamps": b"true"}, "verbose_json"),
        ({"prompt": "names", "temperature": "0.2"}, {}, "json"),  # accepted, not passed on
    ],
)
def test_requests_for_the_runtime(given, sent, fmt):
    parts, wanted = speech.for_parakeet(fields(**given))
    assert {p.name: p.data for p in parts if p.name != "file"} == sent
    assert parts[0] == AUDIO and wanted.response_format == fmt


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"language": "english"}, "language", "accepts bg, cs"),
        ({"language": "ja"}, "language", "ISO-639-1"),
        ({"response_format": "docx"}, "response_format", "json, text, srt, verbose_json, vtt"),
        ({"timestamp_granularities__": "word"}, "timestamp_granularities", "verbose_json"),
        (
            {"response_format": "verbose_json", "timestamp_granularities__": "char"},
            "timestamp_granularities",
            "segment, word",
        ),
        ({"stream": "true"}, "stream", "does not stream"),
    ],
)
def test_refusals_name_the_field_and_what_is_accepted(given, field, says):
    with pytest.raises(GatewayError) as refused:
        speech.for_parakeet(fields(**given))
    assert refused.value.status == 400 and refused.value.param == field
    assert says in refused.value.message


def test_no_file_and_translations_are_refused():
    with pytest.raises(GatewayError, match="file"):
        speech.for_parakeet([speech.Part("model", b"x")])
    with pytest.raises(GatewayError, match="does not translate"):
        speech.for_parakeet(fields(), translation=True)


ANSWER = {
    "text": " one two three ",
    "language": "fr-FR",
    "duration": 3723.5,
    "segments": [
        {"start": 0.0, "end": 1.25, "text": "one two"},
        {"start": 3722.0, "end": 3723.5, "text": " three"},
    ],
    "words": [{"word": "one", "start": 0.0, "end": 0.5}],
}


@pytest.mark.parametrize(
    ("fmt", "kind", "body"),
    [
        ("json", b"application/json", b'{"text": "one two three"}'),
        ("text", b"text/plain; charset=utf-8", b"one two three\n"),
        (
            "srt",
            b"application/x-subrip; charset=utf-8",
            b"1\n00:00:00,000 --> 00:00:01,250\none two\n\n"
            b"2\n01:02:02,000 --> 01:02:03,500\nthree\n",
        ),
        (
            "vtt",
            b"text/vtt; charset=utf-8",
            b"WEBVTT\n\n00:00:00.000 --> 00:00:01.250\none two\n\n"
            b"01:02:02.000 --> 01:02:03.500\nthree\n",
        ),
    ],
)
def test_answers_built_from_the_timings(fmt, kind, body):
    assert speech.from_parakeet(ANSWER, speech.Wanted(fmt, ("segment",), None)) == (kind, body)


def test_verbose_json_names_the_language_and_carries_the_granularities_asked():
    _, body = speech.from_parakeet(ANSWER, speech.Wanted("verbose_json", ("segment", "word"), None))
    verbose = json.loads(body)
    assert verbose["language"] == "french" and verbose["duration"] == 3723.5
    assert [s["id"] for s in verbose["segments"]] == [0, 1]
    assert verbose["words"] == [{"word": "one", "start": 0.0, "end": 0.5}]
    _, body = speech.from_parakeet(ANSWER, speech.Wanted("verbose_json", ("word",), "fr"))
    assert "segments" not in json.loads(body)


def test_subtitles_without_timings_are_a_clear_upstream_failure():
    with pytest.raises(GatewayError) as failed:
        speech.from_parakeet({"text": "hi"}, speech.Wanted("srt", ("segment",), None))
    assert failed.value.status == 502 and "timestamps" in failed.value.message
    with pytest.raises(GatewayError):
        speech.from_parakeet(["not", "an", "object"], speech.Wanted("json", (), None))


def test_multipart_round_trip_and_malformed_bodies():
    body, kind = speech.build_multipart([AUDIO, speech.Part("model", b"speech")])
    parts = speech.parse_multipart(body, speech.boundary_of(kind))
    assert parts == [AUDIO, speech.Part("model", b"speech")]
    for broken in (b"", b"--b\r\nno end", b"--b\r\n\r\n--b--"):
        with pytest.raises(GatewayError):
            speech.parse_multipart(broken, "b")
    many = b"".join(
        b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n1\r\n' for _ in range(40)
    )
    with pytest.raises(GatewayError, match="more than"):
        speech.parse_multipart(many + b"--b--\r\n", "b")


WHISPER_ANSWER = {
    "task": "transcribe",
    "language": "fr",
    "duration": 2.5,
    "text": " un deux trois",
    "segments": [
        {"id": 0, "start": 0.0, "end": 1.0, "text": " un deux", "tokens": [1, 2],
         "temperature": 0.2, "avg_logprob": -0.3, "compression_ratio": 1.2,
         "no_speech_prob": 0.05},
        {"id": 1, "start": 1.0, "end": 2.5, "text": " trois", "tokens": "broken"},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("json", b'{"text": "un deux trois"}'),
        ("text", b"un deux trois\n"),
        ("srt", b"1\n00:00:00,000 --> 00:00:01,000\nun deux\n\n"
                b"2\n00:00:01,000 --> 00:00:02,500\ntrois\n"),
        ("vtt", b"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nun deux\n\n"
                b"00:00:01.000 --> 00:00:02.500\ntrois\n"),
    ],
)  # fmt: skip
def test_faster_whisper_answers_rebuilt_in_the_format_asked(fmt, body):
    assert speech.from_whisper_server(WHISPER_ANSWER, speech.Wanted(fmt, ("segment",), None))[
        1
    ] == (body)


def test_faster_whisper_verbose_json_keeps_its_segment_figures_and_names_the_language():
    wanted = speech.Wanted("verbose_json", ("segment",), None, "translate")
    verbose = json.loads(speech.from_whisper_server(WHISPER_ANSWER, wanted)[1])
    assert verbose["task"] == "translate" and verbose["language"] == "french"
    first, second = verbose["segments"]
    assert first["tokens"] == [1, 2] and first["avg_logprob"] == -0.3 and first["seek"] == 0
    assert second["tokens"] == []  # not a list of token ids: left out, not passed on
    assert "words" not in verbose


@pytest.mark.parametrize("breaker", [b"\n", b"\r", b"\x00"])
def test_a_part_header_with_a_line_break_is_refused_not_passed_to_the_runtime(breaker):
    """A bare LF or CR inside a part's header would become a header line of the gateway's own
    request to the runtime (a second Content-Disposition renaming the audio part)."""
    smuggled = b"audio/wav" + breaker + b'Content-Disposition: form-data; name="model"'
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        b"Content-Type: " + smuggled + b"\r\n\r\nRIFF....\r\n--b--\r\n"
    )
    with pytest.raises(GatewayError, match="control character") as refused:
        speech.parse_multipart(body, "b")
    assert refused.value.status == 400
