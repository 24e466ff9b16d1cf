"""The defaults that depend on the model (jobs/manifest/model_defaults.py): each decision as a
table of cases, then through the fill, where what Check model found (ctx.model) fills them."""

from __future__ import annotations

import copy

import pytest

from jobs import manifest as mf
from jobs.manifest.model_defaults import pinned_uri
from tests.jobs.manifest.manifest_support import SHORTEST, context, existing, model_facts

GIB = 2**30
OLD = "1" * 40
NEW = "2" * 40
BGE_WEIGHTS = 2_271_145_830


@pytest.mark.parametrize(
    "master, limit, expected",
    [
        (None, 8192, None),  # no master: the runtime's own default
        (8192, 8192, 8192),
        (32768, None, 32768),  # the model's limit unknown: the master is trusted
        (32768, 8192, None),  # above the model's own limit it would not start
        (4096, 131072, 4096),
    ],
)
def test_default_context(master, limit, expected):
    assert mf.default_context(master, limit) == expected


@pytest.mark.parametrize(
    "weights, expected",
    [
        (None, None),
        (0, None),
        (GIB, None),  # the built-in 4Gi holds it
        (2 * GIB, None),  # (2 + 1) * 4/3 = 4Gi exactly
        (BGE_WEIGHTS, 5 * GIB),
        (15 * GIB, 22 * GIB),
    ],
)
def test_cpu_memory(weights, expected):
    assert mf.cpu_memory(weights) == expected


def served(uri: str) -> dict:
    return {"spec": {"source": {"type": "Model", "model": {"uri": uri}}}}


@pytest.mark.parametrize(
    "uri, commit, before, has_served, expected",
    [
        ("hf://BAAI/bge-m3", NEW, None, False, f"hf://BAAI/bge-m3:{NEW}"),
        ("hf://BAAI/bge-m3:main", NEW, None, False, f"hf://BAAI/bge-m3:{NEW}"),  # a branch
        (f"hf://BAAI/bge-m3:{OLD}", OLD, None, False, None),  # pinned already
        ("hf://BAAI/bge-m3", None, None, False, None),  # Check model could not resolve it
        ("s3://bucket/model", NEW, None, False, None),
        # A model that has served keeps its commit (the uri is fixed): the same manifest
        # applied again after main moved changes nothing.
        ("hf://BAAI/bge-m3", NEW, f"hf://BAAI/bge-m3:{OLD}", True, f"hf://BAAI/bge-m3:{OLD}"),
        ("hf://baai/BGE-M3", NEW, f"hf://BAAI/bge-m3:{OLD}", True, f"hf://BAAI/bge-m3:{OLD}"),
        # It served unpinned before defaults pinned: it stays as it served.
        ("hf://BAAI/bge-m3", NEW, "hf://BAAI/bge-m3", True, None),
        # Not served yet: the uri may still be corrected, so it follows the branch.
        ("hf://BAAI/bge-m3", NEW, f"hf://BAAI/bge-m3:{OLD}", False, f"hf://BAAI/bge-m3:{NEW}"),
        # Another repository: the fixed-field rule refuses it; the pin is the new one's.
        ("hf://BAAI/bge-m3", NEW, f"hf://BAAI/other:{OLD}", True, f"hf://BAAI/bge-m3:{NEW}"),
    ],
)
def test_pinned_uri(uri, commit, before, has_served, expected):
    existing_manifest = served(before) if before else None
    assert pinned_uri(mf.parse_uri(uri), commit, existing_manifest, has_served) == expected


def asked(**kw) -> mf.DefaultsAsked:
    values = {
        "uri": mf.parse_uri("hf://BAAI/bge-m3"),
        "vllm_fields": True,
        "generative_on_cpu": True,
        "context_given": False,
        "memory_given": False,
        "master_context": 8192,
    }
    return mf.DefaultsAsked(**(values | kw))


BGE = model_facts(generative=True, max_context_tokens=8192, weight_bytes=BGE_WEIGHTS, commit=NEW)
PINNED = f"hf://BAAI/bge-m3:{NEW}"


@pytest.mark.parametrize(
    "what, model, expected",
    [
        (asked(), BGE, mf.ModelDefaults(8192, 5 * GIB, PINNED)),
        # Not asked yet, or the Hub is down: the master's context, the built-in memory.
        (asked(), None, mf.ModelDefaults(8192, None, None)),
        (asked(context_given=True, memory_given=True), BGE, mf.ModelDefaults(None, None, PINNED)),
        (asked(generative_on_cpu=False), BGE, mf.ModelDefaults(8192, None, PINNED)),  # GPU
        (asked(vllm_fields=False), BGE, mf.ModelDefaults(None, 5 * GIB, PINNED)),  # parakeet
        (asked(master_context=None), BGE, mf.ModelDefaults(None, 5 * GIB, PINNED)),
        (
            asked(uri=mf.parse_uri(PINNED)),
            BGE,
            mf.ModelDefaults(8192, 5 * GIB, None),
        ),
    ],
)
def test_model_defaults(what, model, expected):
    assert mf.model_defaults(what, model) == expected


def test_the_hub_down_keeps_the_memory_an_application_runs_with():
    before = served(PINNED)
    before["spec"]["source"]["model"]["resources"] = {"memory": "21Gi"}
    kept = mf.model_defaults(asked(existing=before), None)
    assert kept.memory == 21 * GIB
    elsewhere = copy.deepcopy(before)
    elsewhere["spec"]["source"]["model"]["uri"] = "hf://BAAI/bge-m3-large"
    assert mf.model_defaults(asked(existing=elsewhere), None).memory is None


# ---- through the fill ----


def on_cpu() -> dict:
    doc = copy.deepcopy(SHORTEST)
    doc["spec"]["profileName"] = "bare"
    return doc


def filled_model(doc: dict, **ctx) -> dict:
    result = mf.parse(doc, context(**ctx))
    assert result.ok, result.refusals
    return result.manifest["spec"]["source"]["model"]


def test_the_fill_takes_the_models_defaults_from_what_check_model_found():
    model = filled_model(on_cpu(), model=BGE, master_context_tokens=8192)
    assert model["uri"] == PINNED
    assert model["serving"]["maxContextTokens"] == 8192
    assert model["resources"]["memory"] == "5Gi"
    assert model["serving"]["kvCacheSize"] == "1280Mi"  # a quarter of the memory


def test_without_check_models_answer_the_built_in_defaults_fill():
    model = filled_model(on_cpu(), master_context_tokens=8192)
    assert model["uri"] == "hf://BAAI/bge-m3"
    assert model["serving"]["maxContextTokens"] == 8192
    assert model["resources"]["memory"] == "4Gi"
    assert model["serving"]["kvCacheSize"] == "1Gi"


def test_values_given_win_over_the_models_defaults():
    doc = on_cpu()
    doc["spec"]["source"]["model"].update(
        {"serving": {"maxContextTokens": 2048}, "resources": {"memory": "12Gi"}}
    )
    model = filled_model(doc, model=BGE, master_context_tokens=8192)
    assert model["serving"]["maxContextTokens"] == 2048
    assert model["resources"]["memory"] == "12Gi"


def test_a_gpu_replica_keeps_the_built_in_memory():
    doc = copy.deepcopy(SHORTEST)
    doc["spec"]["source"]["model"]["resources"] = {
        "accelerator": {"gpu": {"model": "l4", "countPerReplica": 1}}
    }
    model = filled_model(doc, model=BGE)
    assert model["resources"]["memory"] == "8Gi"
    assert model["uri"] == PINNED


def test_a_served_application_applied_again_after_main_moved_is_unchanged():
    first = mf.parse(on_cpu(), context(model=BGE))
    moved = model_facts(**{**BGE.__dict__, "commit": "3" * 40})  # main moved on
    again = mf.parse(on_cpu(), context(model=moved, existing=existing(first.manifest, True)))
    assert again.ok, again.refusals
    assert again.manifest == first.manifest


def test_refill_is_needed_only_when_the_model_changes_a_default():
    result = mf.parse(on_cpu(), context(master_context_tokens=8192))
    assert mf.refill_needed(result, BGE)
    given = on_cpu()
    given["spec"]["source"]["model"].update(
        {"uri": PINNED, "serving": {"maxContextTokens": 8192}, "resources": {"memory": "5Gi"}}
    )
    assert not mf.refill_needed(mf.parse(given, context(master_context_tokens=8192)), BGE)


def test_a_refill_is_the_parse_with_what_check_model_found_without_reading_again():
    """The dry run reads a document once: when Check model's answer changes a default it
    fills what it read again (refill), which answers what parsing with that answer would."""
    docs = [on_cpu(), copy.deepcopy(SHORTEST), {**on_cpu(), "extra": 1}]
    docs[1]["spec"]["source"]["model"]["serving"] = {"maxContextTokens": "many"}  # refused
    for doc in docs:
        before = context(master_context_tokens=32768)
        first = mf.parse(doc, before)
        read = copy.deepcopy(first.draft)
        after = context(model=BGE, master_context_tokens=32768)
        refilled = mf.refill(first, after)
        parsed = mf.parse(doc, after)
        assert refilled == parsed
        assert refilled.problems() == parsed.problems()
        assert first.draft == read  # the fill left what it read as it was
    assert mf.refill(mf.parse("[1, 2]", context()), context(model=BGE)).manifest is None
