"""Property tests: any input gives a ParseResult (never an exception), and for a valid
manifest `get` parses back to itself with no new problems."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.manifest import (
    ManifestContext,
    ParseResult,
    format_bytes,
    load_document,
    parse,
    parse_bytes,
    parse_quantity,
    runtime_of,
    scaling_of,
)

# tests/ may or may not be a package (both layouts are in use); the support module is
# found either way.
try:
    from .manifest_support import (
        COMMIT,
        FULL_YAML,
        GPU,
        MULTINODE,
        PARAKEET,
        SHORTEST,
        context,
        existing,
        m,
    )
except ImportError:
    from manifest_support import (
        COMMIT,
        FULL_YAML,
        GPU,
        MULTINODE,
        PARAKEET,
        SHORTEST,
        context,
        existing,
        m,
    )
from jobs.manifest.parse import INTERNAL_ERROR


def fast(examples: int) -> settings:
    # No example database: the suite writes nothing into the work tree.
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


CTX = context()
ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "s3://b"}}},
}
SEEDS = [
    parse(SHORTEST, CTX).manifest,
    parse(FULL_YAML, CTX).manifest,
    load_document(FULL_YAML),
    m({"uri": f"hf://BAAI/bge-m3:{COMMIT}", **GPU, "scaling.maxReplicas": 5}),
    m({"uri": "s3://bkt/fraud/model.joblib", "format": "SKLearn", "scaling.maxReplicas": 3}),
    m({"spec.source": {"type": "YAML", "inferenceService": ISVC}}),
    m(
        {
            "spec.profileName": "bare",
            "resources.accelerator": {"gpu": {"countPerReplica": 2}},
            "scaling.maxReplicas": 2,
        }
    ),
    # Runtimes that take no vLLM defaults, runtime-chosen apiFormat, multi-node.
    m({"uri": PARAKEET, **GPU, "scaling.maxReplicas": 3}),
    m({"uri": f"{PARAKEET}:{COMMIT}", "runtime.engine": "parakeet", "scaling.maxReplicas": 2}),
    m(
        {
            "runtime.engine": "my-vllm",
            "engine.extraArgs": ["--dtype=half"],
            "serving.kvCacheSize": "1Gi",
        }
    ),
    m({"uri": "s3://bkt/wine", "format": "MLflow", "scaling.maxReplicas": 2}),
    m(MULTINODE),
]
assert all(parse(seed, CTX).ok for seed in SEEDS)

KNOWN_WORDS = [
    "apiVersion",
    "kind",
    "spec",
    "status",
    "name",
    "profileName",
    "namespace",
    "syncType",
    "access",
    "exposure",
    "domain",
    "accessPolicy",
    "source",
    "type",
    "model",
    "uri",
    "format",
    "runtime",
    "engine",
    "isolation",
    "dtype",
    "quantization",
    "tensorParallelSize",
    "pipelineParallelSize",
    "extraArgs",
    "serving",
    "apiFormat",
    "maxContextTokens",
    "kvCacheSize",
    "maxConcurrentRequests",
    "multimodal",
    "maxImagesPerPrompt",
    "resources",
    "cpu",
    "memory",
    "accelerator",
    "gpu",
    "vendor",
    "countPerReplica",
    "capacityType",
    "nodesPerReplica",
    "scaling",
    "minReplicas",
    "maxReplicas",
    "metric",
    "requestsWaiting",
    "queue",
    "cache",
    "enabled",
    "size",
    "nodeGroup",
    "inferenceService",
]
INTERESTING = [
    "8Gi",
    "0",
    "-1",
    "1e3",
    "500m",
    "0.5",
    "Domain",
    "Internal",
    "YAML",
    "Model",
    "vLLM",
    "SKLearn",
    "VirtualMachine",
    "amd",
    "l4",
    "hf://a/b",
    "s3://bkt/k",
    "pvc://c/p",
    "oci://r.io/x:1",
    "--dtype=half",
    "OpenAI",
    "V1",
    "V2",
    "gpu-queue",
    "gpu-l4",
    "prod-inference",
    "bare",
    "models.example.com",
    "default",
    "auto",
    "",
    " ",
    "é",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 63, 64, 65, 100, 101, 1024, 1025, 2**31]),
    # Too long for str(): messages must still render it.
    st.just(None).map(lambda _: 10**5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(INTERESTING),
)
keys = st.one_of(st.sampled_from(KNOWN_WORDS), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=8,
)


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += paths(value, (*prefix, index))
    return out


def mutate(doc: Any, data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        candidates = paths(doc)
        if not candidates:
            return doc
        path = data.draw(st.sampled_from(candidates), label="path")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        action = data.draw(st.sampled_from(["delete", "replace", "rename", "add"]), label="op")
        if action == "delete":
            del parent[last]
        elif action == "replace":
            parent[last] = data.draw(values, label="value")
        elif action == "rename" and isinstance(parent, dict):
            parent[data.draw(keys, label="key")] = parent.pop(last)
        elif action == "add" and isinstance(parent[last], dict):
            parent[last][data.draw(keys, label="key")] = data.draw(values, label="value")
    return doc


def check_result(result: Any, ctx: ManifestContext) -> None:
    assert isinstance(result, ParseResult)
    for problem in result.problems():
        assert INTERNAL_ERROR not in problem.message, problem
        assert isinstance(problem.path, str) and isinstance(problem.message, str)
        assert problem.level in ("refusal", "warning")
    assert all(p.level == "refusal" for p in result.refusals)
    assert all(p.level == "warning" for p in result.warnings)
    assert result.manifest is None or isinstance(result.manifest, dict)
    if result.manifest is not None:
        assert isinstance(runtime_of(result.manifest), str)
        assert isinstance(scaling_of(result.manifest), str)
    if result.ok:
        check_round_trip(result, ctx)


def check_round_trip(result: ParseResult, ctx: ManifestContext) -> None:
    """get then apply again: same manifest, no refusal, no warning it did not have."""
    manifest = result.manifest
    assert manifest is not None
    again = parse(json.loads(json.dumps(manifest)), ctx)  # what the API stores and returns
    assert again.ok, [str(p) for p in again.refusals]
    assert again.manifest == manifest
    assert {str(p) for p in again.warnings} <= {str(p) for p in result.warnings}


@fast(500)
@given(doc=values)
def test_random_documents_never_raise(doc):
    check_result(parse(doc, CTX), CTX)


@fast(200)
@given(
    doc=st.dictionaries(keys, values, max_size=3), spec=st.dictionaries(keys, values, max_size=6)
)
def test_random_specs_never_raise(doc, spec):
    doc = {"apiVersion": "servedeck.io/v1", "kind": "Application", **doc, "spec": spec}
    check_result(parse(doc, CTX), CTX)


@fast(700)
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_manifests_never_raise_and_valid_ones_round_trip(seed, data):
    check_result(parse(mutate(seed, data), CTX), CTX)


@fast(200)
@given(seed=st.sampled_from(SEEDS), data=st.data(), served=st.booleans())
def test_mutated_revisions_of_an_existing_app(seed, data, served):
    ctx = context(existing=existing(parse(seed, CTX).manifest, served=served))
    check_result(parse(mutate(seed, data), ctx), ctx)


@fast(400)
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_random_text_never_raises(text):
    result = parse(text, CTX)
    check_result(result, CTX)


@fast(300)
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_yaml_text_never_raises(seed, data):
    import yaml

    text = yaml.safe_dump(seed, sort_keys=False)
    position = data.draw(st.integers(0, len(text)), label="position")
    insert = data.draw(st.sampled_from([":", "-", " ", "\n", "  ", "[", "{", "'", "&a", "*a"]))
    check_result(parse(text[:position] + insert + text[position:], CTX), CTX)


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random value in the spirit of `values`, built directly: many times cheaper than a
    recursive strategy, so thousands of mutations fit in a few seconds."""
    roll = rng.random()
    if depth < 2 and roll < 0.1:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    if depth < 2 and roll < 0.2:
        return {rng.choice(KNOWN_WORDS): junk(rng, depth + 1) for _ in range(rng.randrange(4))}
    return rng.choice(
        [
            None,
            True,
            False,
            rng.randrange(-5, 70),
            rng.randrange(-(2**70), 2**70),
            rng.random() * rng.choice([1, 100, 1e30]),
            float("nan"),
            rng.choice(INTERESTING),
            rng.choice(KNOWN_WORDS),
            "".join(rng.choice("aZ9-_.:/ @?=\n\t{}[]é") for _ in range(rng.randrange(12))),
        ]
    )


def random_mutation(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randrange(1, 5)):
        candidates = paths(doc)
        if not candidates:
            break
        path = rng.choice(candidates)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        last, action = path[-1], rng.randrange(4)
        if action == 0:
            del parent[last]
        elif action == 1:
            parent[last] = junk(rng)
        elif action == 2 and isinstance(parent, dict):
            parent[rng.choice(KNOWN_WORDS)] = parent.pop(last)
        elif action == 3 and isinstance(parent[last], dict):
            parent[last][rng.choice(KNOWN_WORDS)] = junk(rng)
    return doc


@fast(250)
@given(rng=st.randoms(use_true_random=False))
def test_thousands_of_random_mutations(rng):
    """Ten mutations per example: 2500 mutated manifests, valid ones checked to round trip."""
    for _ in range(10):
        seed = rng.choice(SEEDS)
        check_result(parse(random_mutation(seed, rng), CTX), CTX)


@fast(500)
@given(n=st.integers(min_value=0, max_value=2**70))
def test_format_bytes_reads_back_exactly(n):
    assert parse_bytes(format_bytes(n)) == n


@fast(500)
@given(text=st.text(max_size=30))
def test_quantity_refuses_with_value_error_only(text):
    try:
        parse_quantity(text)
    except ValueError as exc:
        assert str(exc)
