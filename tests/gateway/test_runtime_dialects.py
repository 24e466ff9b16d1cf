"""One OpenAI surface whichever runtime serves the model: the gateway in front of stand-ins
speaking infinity-emb's and faster-whisper-server's dialects (tests/fakes/model_server.py),
called with the official openai client and httpx, answers as it does in front of vLLM's, and
meters the tokens. The dialect is the runtime the backend recorded for the application
(Application.runtime), not the manifest's engine nor a guess from the answers."""

import base64
import math
import struct

import httpx
import openai
import pytest

from tests.gateway.support import StandIn, caught_up, make_app, make_key


@pytest.fixture(scope="module")
def infinity_server():
    server = StandIn("minilm", "--runtime", "infinity")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def whisper_server():
    # faster-whisper-server serves the one model it was started with, under no name.
    server = StandIn("whisper", "--runtime", "faster-whisper")
    yield server
    server.stop()


@pytest.fixture
def world(org, alpha, infinity_server, whisper_server, gateway):
    make_app(org, "alpha", alpha.url)  # vLLM's surface, for comparison
    # The manifests say vllm (the default engine); the backend recorded what runs them.
    make_app(org, "minilm", infinity_server.url, served_by="infinity")
    make_app(org, "whisper", whisper_server.url, served_by="faster-whisper")
    _, plain = make_key(org)
    caught_up(gateway)
    return plain


def client(gateway, plain):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=plain, max_retries=0)


def post(gateway, plain, path, body):
    return httpx.post(
        gateway.url + path, headers={"Authorization": f"Bearer {plain}"}, json=body, timeout=10
    )


def without(answer: dict, *names: str) -> dict:
    return {k: v for k, v in answer.items() if k not in names}


DOCUMENTS = ["  where is munich  ", "the sky is blue", "munich is a city where beer is"]


def test_rerank_through_infinity_answers_as_vllm_does(gateway, world, infinity_server):
    plain = world
    for top_n in (0, 2):
        asked = {"query": "where is munich", "documents": DOCUMENTS, "top_n": top_n}
        vllm = post(gateway, plain, "/v1/rerank", {"model": "alpha", **asked})
        ours = post(gateway, plain, "/v1/rerank", {"model": "minilm", **asked})
        assert vllm.status_code == ours.status_code == 200, ours.text
        assert without(ours.json(), "id", "model") == without(vllm.json(), "id", "model")
    answer = ours.json()
    assert answer["model"] == "minilm" and answer["id"].startswith("rerank-")
    assert [r["index"] for r in answer["results"]] == [0, 2]  # best first, cut to top_n
    # The document as the client sent it (infinity strips it), in vLLM's shape.
    assert answer["results"][0]["document"] == {"text": DOCUMENTS[0], "multi_modal": None}
    # infinity was asked in its own terms.
    assert infinity_server.events()[-1] == (
        "fields: documents,model,query,raw_scores,return_documents,top_n"
    )
    # Untranslated, the client would get Cohere's shape.
    raw = httpx.post(infinity_server.url + "/v1/rerank", json={"model": "minilm", **asked})
    assert raw.json()["results"][0]["document"] is None


def test_score_through_infinity_answers_as_vllm_does(gateway, world):
    plain = world
    texts = {"text_1": "a b", "text_2": ["c", "a b", "b d"]}
    vllm = post(gateway, plain, "/v1/score", {"model": "alpha", **texts}).json()
    ours = post(gateway, plain, "/v1/score", {"model": "minilm", **texts}).json()
    assert without(ours, "id", "created", "model") == without(vllm, "id", "created", "model")
    assert [d["index"] for d in ours["data"]] == [0, 1, 2]  # the order of text_2
    assert [d["score"] for d in ours["data"]] == [0.0, 1.0, round(1 / 3, 6)]
    # vLLM's newer names for the two sides work too.
    named = post(
        gateway, plain, "/v1/score", {"model": "minilm", "queries": "a b", "documents": ["a b"]}
    ).json()
    assert named["data"] == [{"index": 0, "object": "score", "score": 1.0}]


def test_embeddings_through_infinity_as_openai_documents_them(gateway, world, infinity_server):
    ai = client(gateway, world)
    texts = ["eating food", "a plane"]
    # vLLM's, 16 dimensions
    base = ai.embeddings.create(model="alpha", input=texts, encoding_format="float").data
    plain = ai.embeddings.create(model="minilm", input=texts).data  # base64, the client's way
    floats = ai.embeddings.create(model="minilm", input=texts, encoding_format="float").data
    for ours, theirs in zip(plain, base, strict=True):
        assert ours.embedding == pytest.approx(theirs.embedding, abs=1e-6)
    assert [e.embedding for e in floats] == [e.embedding for e in base]
    # `dimensions`: cut and normalised again, as OpenAI's shortened embeddings are (infinity
    # only cuts), in either encoding.
    for encoding in ("float", "base64"):
        short = ai.embeddings.create(
            model="minilm", input=texts, dimensions=4, encoding_format=encoding
        ).data
        if encoding == "base64":
            vectors = [list(struct.unpack("<4f", base64.b64decode(e.embedding))) for e in short]
        else:
            vectors = [e.embedding for e in short]
        for vector, full in zip(vectors, base, strict=True):
            assert len(vector) == 4
            assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0)
            norm = math.sqrt(sum(x * x for x in full.embedding[:4]))
            assert vector == pytest.approx([x / norm for x in full.embedding[:4]], abs=1e-6)
    # infinity's own `modality` (it would fetch image URLs) is not passed on.
    ai.embeddings.create(model="minilm", input="x", extra_body={"modality": "image"})
    assert infinity_server.events()[-1] == "fields: encoding_format,input,model"


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        ("/v1/embeddings", {"input": [1, 2, 3]}, "input", "token ids are not accepted"),
        ("/v1/embeddings", {"input": []}, "input", "at least one"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "encoding_format", "float"),
        ("/v1/embeddings", {"input": "x", "dimensions": 0}, "dimensions", "1 or more"),
        ("/v1/embeddings", {"input": "x", "dimensions": True}, "dimensions", "whole number"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": -1}, "top_n", "0 or more"),
        ("/v1/rerank", {"query": 3, "documents": ["a"]}, "query", "not text"),
        ("/v1/rerank", {"query": "q", "documents": "a" * 3}, None, None),  # one text: fine
        ("/v1/score", {"text_1": ["a", "b"], "text_2": ["a", "b"]}, "text_1", "one text_1"),
        ("/v1/score", {"text_2": ["a"]}, "text_1", "missing"),
        ("/v1/score", {"text_1": "a", "text_2": ["a"], "use_activation": 1}, "use_activation", ""),
    ],
)
def test_what_infinity_cannot_honour_is_refused_naming_the_field(
    gateway, world, path, body, param, says
):
    answer = post(gateway, world, path, {"model": "minilm", **body})
    if param is None:
        assert answer.status_code == 200, answer.text
        return
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and says in error["message"], error


def test_infinity_refusals_and_routes_it_does_not_serve_are_in_openai_shape(gateway, world):
    ai = client(gateway, world)
    with pytest.raises(openai.BadRequestError) as refused:
        ai.embeddings.create(model="minilm", input="x", dimensions=99)
    assert "infinity-emb refused the request (status 400)" in refused.value.message
    assert "Select between 1 and 16" in refused.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        ai.chat.completions.create(model="minilm", messages=[{"role": "user", "content": "hi"}])
    assert "served by infinity-emb, which does not answer /v1/chat/completions" in (
        missing.value.message
    )
    assert missing.value.body["code"] == "route_not_served"


def test_translated_routes_are_metered_with_their_tokens(gateway, world):
    plain = world
    client(gateway, plain).embeddings.create(model="minilm", input=["one two", "three"])
    post(gateway, plain, "/v1/rerank", {"model": "minilm", "query": "a", "documents": ["a b"]})
    post(gateway, plain, "/v1/score", {"model": "minilm", "text_1": "a", "text_2": ["b c"]})
    post(gateway, plain, "/v1/rerank", {"model": "minilm", "query": 1, "documents": ["a"]})
    records = gateway.meter.settled(4)
    assert [(r.route, r.status, r.prompt_tokens) for r in records] == [
        ("/v1/embeddings", 200, 3),
        ("/v1/rerank", 200, 3),
        ("/v1/score", 200, 3),
        ("/v1/rerank", 400, 0),
    ]
    minilm = gateway.gateway.keeper.current.routes[(records[0].organization_id, "minilm")]
    assert {r.application_id for r in records} == {minilm.id}


AUDIO = ("speech.wav", b"the capital of france is paris and the river is the seine", "audio/wav")


def test_transcriptions_through_faster_whisper_in_every_openai_format(
    gateway, world, whisper_server
):
    ai = client(gateway, world)
    transcribe = ai.audio.transcriptions.create
    assert transcribe(model="whisper", file=AUDIO).text == (
        "the capital of france is paris and the river is the seine"
    )
    assert whisper_server.events()[-1] == "fields: file,model_name,response_format"
    text = transcribe(model="whisper", file=AUDIO, response_format="text")
    assert text == "the capital of france is paris and the river is the seine\n"
    srt = transcribe(model="whisper", file=AUDIO, response_format="srt")
    assert srt == (
        "1\n00:00:00,000 --> 00:00:02,400\nthe capital of france is\n\n"
        "2\n00:00:02,500 --> 00:00:04,900\nparis and the river is\n\n"
        "3\n00:00:05,000 --> 00:00:05,900\nthe seine\n"
    )
    vtt = transcribe(model="whisper", file=AUDIO, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.400\nthe capital of france is\n")
    verbose = transcribe(
        model="whisper",
        file=AUDIO,
        response_format="verbose_json",
        timestamp_granularities=["segment"],
        language="en",
        temperature=0.2,
        prompt="Paris",
    )
    assert verbose.language == "english" and verbose.duration == 6.0
    assert [s.id for s in verbose.segments] == [0, 1, 2]
    assert verbose.segments[1].text == "paris and the river is"
    assert verbose.segments[1].tokens == [50364, 50365, 50366, 50367, 50368]
    assert verbose.segments[1].seek == 0 and verbose.segments[1].avg_logprob == -0.25
    # Asked for verbose_json; OpenAI's `model` and granularities are not its fields.
    assert whisper_server.events()[-1] == (
        "fields: file,language,model_name,prompt,response_format,temperature"
    )
    translated = ai.audio.translations.create(model="whisper", file=AUDIO, response_format="srt")
    assert translated.startswith("1\n00:00:00,000 --> 00:00:02,400\n")


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"timestamp_granularities": ["word"], "response_format": "verbose_json"},
         "timestamp_granularities", "segment timings only"),
        ({"language": "english"}, "language", "ISO-639-1"),
        ({"temperature": 1.5}, "temperature", "from 0 to 1"),
        ({"response_format": "docx"}, "response_format", "json, text, srt"),
    ],
)  # fmt: skip
def test_what_faster_whisper_cannot_honour_is_refused_naming_the_field(
    gateway, world, fields, param, says
):
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway, world).audio.transcriptions.create(model="whisper", file=AUDIO, **fields)
    assert refused.value.body["param"] == param and says in refused.value.message


def test_faster_whisper_has_no_models_route_and_the_gateway_needs_none(
    gateway, world, whisper_server
):
    assert httpx.get(whisper_server.url + "/v1/models", timeout=5).status_code == 404
    ai = client(gateway, world)
    assert "whisper" in [m.id for m in ai.models.list()]
    assert ai.models.retrieve("whisper").id == "whisper"
    with pytest.raises(openai.NotFoundError) as missing:
        ai.embeddings.create(model="whisper", input="x")
    assert "faster-whisper-server, which does not answer /v1/embeddings" in missing.value.message


@pytest.mark.parametrize("model", ["minilm", "alpha"])  # translated, and passed through
def test_a_plain_answer_is_read_bounded(gateway, world, model):
    gateway.gateway.max_answer = 300  # bytes; the rerank answer is longer
    asked = {"model": model, "query": "q", "documents": DOCUMENTS}
    answer = post(gateway, world, "/v1/rerank", asked)
    assert answer.status_code == 502, answer.text
    assert "larger than 300 bytes" in answer.json()["error"]["message"]
    gateway.gateway.max_answer = 1 << 20
    assert post(gateway, world, "/v1/rerank", asked).status_code == 200


FAKE_WHISPER = """\
#!{python}
import os, sys
stand_in = {stand_in!r}
os.execv(sys.executable, [sys.executable, stand_in, "--runtime", "faster-whisper", *sys.argv[1:]])
"""


def test_the_dialect_is_the_runtime_the_local_backend_recorded(cpu_machine, tmp_path, org, gateway):
    """The real local backend picks faster-whisper-server for a CTranslate2 folder (here the
    stand-in, installed where scripts/cpu_runtimes.sh puts it) and records it; the gateway
    reads the record and speaks that dialect, though the manifest says engine vllm."""
    import sys

    from jobs.backends.base import Observed
    from jobs.backends.local import runtimes as rt
    from jobs.backends.local.runner import LocalRunner
    from jobs.lifecycle import record_status
    from tests.gateway.support import STAND_IN
    from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, whisper_folder

    runtimes, models = cpu_machine
    program = runtimes / "faster-whisper" / "bin" / rt.FASTER_WHISPER.program
    program.parent.mkdir(parents=True)
    program.write_text(FAKE_WHISPER.format(python=sys.executable, stand_in=str(STAND_IN)))
    program.chmod(0o755)
    (runtimes / "faster-whisper" / rt.INSTALLED_STAMP).write_text("test\n")
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    wanted = manifest("scribe", f"file://{whisper_folder(models, 'tiny-en')}")
    try:
        runner.apply("scribe", wanted, 1)
        status = running(runner, "scribe")
        assert status.runtime == "faster-whisper"
        application = make_app(org, "scribe", "", phase="Pending")
        assert application.manifest["spec"]["source"]["model"]["runtime"]["engine"] == "vllm"
        record_status(application, Observed.of(status))
        application.refresh_from_db()
        assert (application.runtime, application.phase) == ("faster-whisper", "Running")
        _, plain = make_key(org)
        caught_up(gateway)
        srt = client(gateway, plain).audio.transcriptions.create(
            model="scribe", file=("a.wav", b"hello there", "audio/wav"), response_format="srt"
        )
        assert srt == "1\n00:00:00,000 --> 00:00:00,900\nhello there\n"
    finally:
        runner.shutdown()
