"""The official `openai` client against the gateway, in front of stand-in model servers: every
public route, streaming, two applications behind one /v1, keys in both headers, and one
metering record per answered request."""

import httpx
import openai
import pytest

from tests.gateway.support import caught_up, make_app, make_key


@pytest.fixture
def world(org, alpha, beta, speech_server, gateway):
    make_app(org, "alpha", alpha.url)
    make_app(org, "beta", beta.url)
    make_app(org, "speech", speech_server.url, runtime="parakeet")
    key, plain = make_key(org)
    caught_up(gateway)
    return key, plain


def client(gateway, plain):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=plain, max_retries=0)


def test_models_lists_what_the_key_may_call(gateway, world, org):
    _, plain = world
    assert sorted(m.id for m in client(gateway, plain).models.list()) == ["alpha", "beta", "speech"]
    _, scoped = make_key(org, "scoped", all_applications=False, applications=["beta"])
    caught_up(gateway)
    assert [m.id for m in client(gateway, scoped).models.list()] == ["beta"]
    assert client(gateway, scoped).models.retrieve("beta").id == "beta"
    with pytest.raises(openai.NotFoundError):
        client(gateway, scoped).models.retrieve("alpha")
    records = gateway.meter.settled(4)
    assert {r.route for r in records} == {"/v1/models"}
    assert [r.status for r in records] == [200, 200, 200, 404]


def test_two_applications_behind_one_v1(gateway, world):
    key, plain = world
    ai = client(gateway, plain)
    for name in ("alpha", "beta"):
        reply = ai.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content.startswith(f"Hello from {name}.")
        assert reply.usage.prompt_tokens == 1
    records = gateway.meter.settled(2)
    assert len(records) == 2
    assert {r.application_id for r in records} == {
        gateway.gateway.keeper.current.routes[(key.organization_id, n)].id
        for n in ("alpha", "beta")
    }
    assert all(
        r.status == 200 and r.api_key_id == key.id and r.completion_tokens > 0 for r in records
    )


def test_the_key_in_x_api_key_works_too(gateway, world):
    _, plain = world
    reply = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"X-API-Key": plain},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200
    assert reply.json()["object"] == "chat.completion"


def test_chat_stream_passes_chunks_and_hides_the_usage_it_asked_for(gateway, world):
    _, plain = world
    stream = client(gateway, plain).chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "one two"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from alpha. You said: one two"
    assert all(c.usage is None for c in chunks)  # the client did not ask for usage
    (record,) = gateway.meter.settled(1)
    assert record.stream and record.status == 200 and not record.failed_in_stream
    assert (record.prompt_tokens, record.completion_tokens) == (2, 7)
    assert record.ttft_ms is not None and record.ttft_ms <= record.latency_ms


def test_chat_stream_keeps_usage_when_the_client_asks(gateway, world):
    _, plain = world
    stream = client(gateway, plain).chat.completions.create(
        model="beta",
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usages = [c.usage for c in stream if c.usage is not None]
    assert len(usages) == 1 and usages[0].completion_tokens == 6


def test_completions_plain_and_streamed(gateway, world):
    _, plain = world
    ai = client(gateway, plain)
    reply = ai.completions.create(model="alpha", prompt="say", max_tokens=3)
    assert reply.choices[0].text == "Hello from alpha."
    streamed = list(ai.completions.create(model="alpha", prompt="say", max_tokens=3, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "Hello from alpha."
    records = gateway.meter.settled(2)
    assert [r.completion_tokens for r in records] == [3, 3]


def test_responses_api(gateway, world):
    _, plain = world
    reply = client(gateway, plain).responses.create(model="alpha", input="hi there")
    assert reply.output_text.startswith("Hello from alpha.")


def test_embeddings_count_prompt_tokens(gateway, world):
    _, plain = world
    reply = client(gateway, plain).embeddings.create(model="beta", input=["a b", "c"])
    assert len(reply.data) == 2 and len(reply.data[0].embedding) == 16
    (record,) = gateway.meter.settled(1)
    assert (record.prompt_tokens, record.completion_tokens) == (3, 0)


def test_score_and_rerank(gateway, world):
    _, plain = world
    ai = client(gateway, plain)
    scored = ai.post(
        "/score", cast_to=object, body={"model": "alpha", "text_1": "a b", "text_2": ["a b", "c"]}
    )
    assert [d["score"] for d in scored["data"]] == [1.0, 0.0]
    ranked = ai.post(
        "/rerank",
        cast_to=object,
        body={"model": "alpha", "query": "red fox", "documents": ["blue sky", "red fox"]},
    )
    assert ranked["results"][0]["index"] == 1


AUDIO = ("talk.wav", b"one two three four five six seven", "audio/wav")


def test_transcription_in_openai_terms(gateway, world):
    _, plain = world
    ai = client(gateway, plain)
    plain_text = ai.audio.transcriptions.create(model="speech", file=AUDIO, language="en")
    assert plain_text.text == "one two three four five six seven"
    srt = ai.audio.transcriptions.create(model="speech", file=AUDIO, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:02,400\none two three four five\n")
    vtt = ai.audio.transcriptions.create(model="speech", file=AUDIO, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.400\n")
    verbose = ai.audio.transcriptions.create(
        model="speech",
        file=AUDIO,
        language="de",
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert verbose.language == "german"
    assert len(verbose.segments) == 2 and len(verbose.words) == 7
    assert verbose.words[1].start == 0.5


def test_transcription_refusals_name_the_field(gateway, world):
    _, plain = world
    ai = client(gateway, plain)
    with pytest.raises(openai.BadRequestError) as bad_language:
        ai.audio.transcriptions.create(model="speech", file=AUDIO, language="english")
    assert "language" in bad_language.value.message and "en" in bad_language.value.message
    with pytest.raises(openai.BadRequestError) as translation:
        ai.audio.translations.create(model="speech", file=AUDIO)
    assert "does not translate" in translation.value.message


def test_only_public_routes_reach_a_model_server(gateway, world):
    _, plain = world
    auth = {"Authorization": f"Bearer {plain}"}
    for path in ("/metrics", "/fake/events", "/v1/../fake/events", "/health", "/v1/load_lora"):
        reply = httpx.post(gateway.url + path, headers=auth, json={"model": "alpha"})
        assert reply.status_code == 404, path
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


def test_an_application_deployed_on_the_local_backend(gateway, deployer):
    from jobs import deploy as verbs
    from tests.helpers import SHORTEST
    from tests.jobs.backends.local.test_lifecycle_local import until

    app = verbs.apply(SHORTEST, deployer).application
    _, plain = make_key(deployer.organization)
    caught_up(gateway)
    ai = client(gateway, plain)
    if app.phase != "Running":  # the stand-in takes a moment to load
        with pytest.raises(openai.InternalServerError) as not_yet:
            ai.embeddings.create(model="bge-embed", input="x")
        assert not_yet.value.status_code == 503 and app.phase in not_yet.value.message
    until(app, "Running")
    caught_up(gateway)
    reply = ai.embeddings.create(model="bge-embed", input="hello world")
    assert len(reply.data[0].embedding) == 16
