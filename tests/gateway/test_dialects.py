"""The dialect table and the infinity translations as pure functions: which routes each
runtime answers, what is sent for each request, what the client gets back, and that random
requests and answers give a clear 400 or 502, never a crash."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.gateway import dialects, infinity, speech
from jobs.gateway.errors import GatewayError


@pytest.mark.parametrize(
    ("runtime", "path", "passes"),
    [
        ("vllm", "/v1/rerank", True),
        ("", "/v1/chat/completions", True),
        ("transformers", "/v1/chat/completions", True),
        ("transformers", "/v1/responses", True),
        ("infinity", "/v1/embeddings", False),
        ("infinity", "/v1/rerank", False),
        ("infinity", "/v1/score", False),
    ],
)
def test_what_passes_through_and_what_is_translated(runtime, path, passes):
    body = {"input": "x", "query": "q", "documents": ["d"], "text_1": "a", "text_2": "b"}
    plan = dialects.plan(runtime, path, body, "m")
    assert (plan is None) == passes


@pytest.mark.parametrize(
    ("runtime", "path"),
    [
        ("transformers", "/v1/embeddings"),
        ("transformers", "/v1/audio/transcriptions"),
        ("infinity", "/v1/chat/completions"),
        ("infinity", "/v1/audio/transcriptions"),
        ("faster-whisper", "/v1/completions"),
        ("parakeet", "/v1/rerank"),
    ],
)
def test_a_route_the_runtime_does_not_answer_is_a_404_that_says_what_it_answers(runtime, path):
    with pytest.raises(GatewayError) as refused:
        dialects.plan(runtime, path, {}, "m")
    assert refused.value.status == 404 and "it answers /v1/" in refused.value.message


def test_rerank_asks_infinity_for_no_documents_and_gives_back_the_clients():
    call = infinity.rerank({"query": "q", "documents": [" a ", "b"], "top_n": 1}, "m")
    assert json.loads(call.body) == {
        "model": "m",
        "query": "q",
        "documents": [" a ", "b"],
        "return_documents": False,
        "raw_scores": False,
        "top_n": 1,
    }
    answer = {
        "results": [{"relevance_score": 0.2, "index": 1}, {"relevance_score": 0.9, "index": 0}],
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }
    out = json.loads(infinity.finish(call, json.dumps(answer).encode()))
    assert out["results"] == [
        {"index": 0, "document": {"text": " a ", "multi_modal": None}, "relevance_score": 0.9}
    ]
    assert out["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    assert set(out) == {"id", "model", "usage", "results"}


def test_use_activation_false_asks_for_raw_scores():
    call = infinity.score({"text_1": ["a"], "text_2": "b", "use_activation": False}, "m")
    assert json.loads(call.body)["raw_scores"] is True
    assert "top_n" not in json.loads(call.body)


@pytest.mark.parametrize(
    "answer",
    [
        b"not json",
        b"[]",
        b'{"results": 3}',
        b'{"results": [{"index": 7, "relevance_score": 1}]}',
        b'{"results": [{"index": 0, "relevance_score": "high"}]}',
        b'{"results": [{"index": true, "relevance_score": 1}]}',
    ],
)
def test_a_broken_rerank_answer_is_a_502(answer):
    call = infinity.rerank({"query": "q", "documents": ["a", "b"]}, "m")
    with pytest.raises(GatewayError) as failed:
        infinity.finish(call, answer)
    assert failed.value.status == 502


def test_a_score_answer_missing_a_text_is_a_502():
    call = infinity.score({"text_1": "a", "text_2": ["b", "c"]}, "m")
    answer = b'{"results": [{"index": 1, "relevance_score": 0.5}]}'
    with pytest.raises(GatewayError, match="fewer scores"):
        infinity.finish(call, answer)


def test_embeddings_without_dimensions_pass_infinitys_answer_unparsed():
    call = infinity.embeddings({"input": "x", "encoding_format": "base64"}, "m")
    assert call.passes_through and json.loads(call.body)["encoding_format"] == "base64"
    assert infinity.finish(call, b"anything at all") == b"anything at all"
    short = infinity.embeddings({"input": "x", "encoding_format": "base64", "dimensions": 2}, "m")
    assert json.loads(short.body)["encoding_format"] == "float"  # re-encoded by the gateway


def test_faster_whisper_requests_in_its_own_field_names():
    audio = speech.Part("file", b"...", "a.wav", "audio/wav")
    fields = [
        audio,
        speech.Part("model", b"w"),
        speech.Part("response_format", b"vtt"),
        speech.Part("language", b"FR"),
        speech.Part("temperature", b"0"),
    ]
    parts, wanted = speech.for_whisper_server(fields, "w")
    assert [(p.name, p.data) for p in parts[1:]] == [
        ("model_name", b"w"),
        ("language", b"fr"),
        ("temperature", b"0.0"),
        ("response_format", b"verbose_json"),
    ]
    assert wanted.response_format == "vtt"
    with pytest.raises(GatewayError, match="always into English"):
        speech.for_whisper_server([*fields[:2], speech.Part("language", b"fr")], "w", True)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=16,
)
REQUESTS = st.dictionaries(
    st.sampled_from(
        ["input", "encoding_format", "dimensions", "query", "documents", "top_n", "text_1",
         "text_2", "queries", "use_activation", "user"]
    ),
    JSONISH,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    path=st.sampled_from(["/v1/embeddings", "/v1/rerank", "/v1/score"]),
    request=REQUESTS,
    answer=st.one_of(st.binary(max_size=80), JSONISH.map(lambda v: json.dumps(v).encode())),
)
def test_random_requests_and_answers_give_a_400_or_a_502_never_a_crash(path, request, answer):
    try:
        plan = dialects.plan("infinity", path, request, "m")
    except GatewayError as refused:
        assert refused.status == 400 and refused.param
        return
    try:
        kind, body = plan.finish(answer)
    except GatewayError as failed:
        assert failed.status == 502
        return
    assert kind == b"application/json"
    if body is not answer:  # embeddings without dimensions pass infinity's bytes on as they are
        json.loads(body)
