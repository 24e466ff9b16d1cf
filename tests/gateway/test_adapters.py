"""LoRA adapters behind /v1: each adapter is a model id of its own, routed to its base
application's replicas with the request's model left as the adapter's name, listed by
/v1/models, and grantable to a key alone (the openai client against the gateway, in front of a
stand-in vLLM started with --lora-modules)."""

import openai
import pytest

from accesspolicies.keys import Invalid, application_names
from tests.gateway.support import StandIn, caught_up, make_app, make_key

ADAPTERS = [
    {"name": "support", "uri": "file:///models/support-lora"},
    {"name": "legal", "uri": "file:///models/legal-lora"},
]


@pytest.fixture(scope="module")
def lora_server():
    server = StandIn("smol", "--lora-modules", "support=/m/support", "legal=/m/legal")
    yield server
    server.stop()


@pytest.fixture
def world(org, lora_server, beta, gateway):
    app = make_app(org, "smol", lora_server.url)
    app.manifest["spec"]["source"]["model"]["adapters"] = ADAPTERS
    app.save()
    make_app(org, "beta", beta.url)
    key, plain = make_key(org)
    caught_up(gateway)
    return app, key, plain


def client(gateway, plain):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=plain, max_retries=0)


def chat(ai, model):
    return ai.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


def test_an_adapter_answers_under_its_own_id_on_the_base_replicas(gateway, world):
    app, key, plain = world
    ai = client(gateway, plain)
    assert sorted(m.id for m in ai.models.list()) == ["beta", "legal", "smol", "support"]
    reply = chat(ai, "support")
    # The base's server answered, asked for the adapter by name (the body passed unchanged).
    assert reply.model == "support"
    assert reply.choices[0].message.content.startswith("Hello from support.")
    assert chat(ai, "smol").choices[0].message.content.startswith("Hello from smol.")
    records = [r for r in gateway.meter.settled(3) if r.route != "/v1/models"]
    # Metered on the base application, each adapter apart from it.
    assert [(r.application_id, r.adapter) for r in records] == [(app.pk, "support"), (app.pk, "")]


def test_a_key_limited_to_an_adapter_calls_only_that_adapter(gateway, world, org):
    _, _, _ = world
    names = application_names(org, ["support"])
    assert names == ["support"]  # a key may name an adapter: it is a model of the organisation
    with pytest.raises(Invalid):
        application_names(org, ["no-such-adapter"])
    _, plain = make_key(org, "adapter-only", all_applications=False, applications=names)
    caught_up(gateway)
    ai = client(gateway, plain)
    assert [m.id for m in ai.models.list()] == ["support"]
    assert chat(ai, "support").choices[0].message.content.startswith("Hello from support.")
    for other in ("smol", "legal"):
        with pytest.raises(openai.PermissionDeniedError, match="not allowed to call"):
            chat(ai, other)


def test_an_application_named_like_an_adapter_keeps_its_own_name(gateway, world, org, beta):
    app, _, plain = world
    app.manifest["spec"]["source"]["model"]["adapters"] = [
        *ADAPTERS,
        {"name": "beta", "uri": "file:///models/beta-lora"},
    ]
    app.save()
    caught_up(gateway)
    reply = chat(client(gateway, plain), "beta")
    assert reply.choices[0].message.content.startswith("Hello from beta.")
