"""Reading the document (YAML, JSON, mappings), unknown fields, several mistakes at once,
and the dry run's plain-language answers."""

from __future__ import annotations

import copy
import json

import pytest

from jobs.manifest import (
    DocumentError,
    Problem,
    is_generative,
    load_document,
    parse,
    runtime_of,
    scaling_of,
)

# tests/ may or may not be a package (both layouts are in use); the support module is
# found either way.
try:
    from .manifest_support import COMMIT, FULL_YAML, GPU, SHORTEST, SHORTEST_YAML, context, m
except ImportError:
    from manifest_support import COMMIT, FULL_YAML, GPU, SHORTEST, SHORTEST_YAML, context, m

P = "spec.source.model"


def test_yaml_json_and_mapping_give_the_same_manifest():
    from_yaml = parse(SHORTEST_YAML, context())
    from_json = parse(json.dumps(SHORTEST), context())
    from_bytes = parse(SHORTEST_YAML.encode(), context())
    from_dict = parse(SHORTEST, context())
    assert from_yaml.manifest == from_json.manifest == from_bytes.manifest == from_dict.manifest
    assert from_yaml.ok


def test_full_manifest_is_valid_and_kept_as_written():
    result = parse(FULL_YAML, context())
    assert result.ok and result.warnings == [], [str(p) for p in result.problems()]
    assert result.manifest == load_document(FULL_YAML)


def test_input_mapping_is_not_modified():
    doc = m({"scaling.maxReplicas": 3})
    before = json.dumps(doc, sort_keys=True)
    parse(doc, context())
    assert json.dumps(doc, sort_keys=True) == before


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("spec:\n  name: [a, b\n  x: 1\n", "line 3, column"),
        ("spec:\n\tname: a\n", "line 2, column 1"),
        ('{"spec": {"name": "a"}', "line 2, column 1"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("a: !!python/object:os.system x\n", "line 1"),
        ("key: 'unterminated\n", "line"),
    ],
    ids=["flow", "tab", "json-comma", "two-docs", "python-tag", "quote"],
)
def test_syntax_errors_name_line_and_column(text, phrase):
    with pytest.raises(DocumentError) as info:
        load_document(text)
    assert phrase in str(info.value)
    result = parse(text, context())
    assert result.manifest is None and not result.ok
    assert result.refusals[0].path == "document"


def test_duplicate_keys_are_refused_with_both_lines():
    text = SHORTEST_YAML.replace("  name: bge-embed\n", "  name: bge-embed\n  name: other\n")
    result = parse(text, context())
    assert [str(p) for p in result.refusals] == [
        "spec.name: is given twice (lines 4 and 5); YAML would keep only the last. "
        "Keep one of them."
    ]
    json_text = '{"spec": {"name": "a", "name": "b"}}'
    assert parse(json_text, context()).refusals[0].path == "spec.name"


@pytest.mark.parametrize(
    ("key", "path"),
    [("", 'spec[""]'), ("a.b", 'spec["a.b"]'), ("two words", 'spec["two words"]')],
)
def test_a_key_that_is_empty_or_dotted_keeps_its_place_in_the_path(key, path):
    doc = copy.deepcopy(SHORTEST)
    doc["spec"][key] = 1
    [refusal] = parse(doc, context()).refusals
    assert refusal.path == path and "unknown field" in refusal.message
    twice = SHORTEST_YAML.replace("spec:\n", f'spec:\n  "{key}": 1\n  "{key}": 2\n')
    assert parse(twice, context()).refusals[0].path == path


@pytest.mark.parametrize(
    ("doc", "phrase"),
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "a list"),
        ("just text", "'just text' (text)"),
        ("42", "42 (a number)"),
        (b"\xff\xfe\x00", "not UTF-8"),
        ("x" * (1024 * 1024 + 1), "at most 1048576 bytes"),
        ("[" * 5000 + "]" * 5000, ""),
    ],
    ids=["empty", "comment", "list", "text", "number", "binary", "huge", "deep"],
)
def test_documents_that_are_not_a_manifest(doc, phrase):
    result = parse(doc, context())
    assert result.manifest is None and not result.ok
    assert phrase in result.refusals[0].message
    assert "internal error" not in result.refusals[0].message


@pytest.mark.parametrize("doc", [None, 42, [1, 2], "x", object(), (1,)], ids=repr)
def test_non_mapping_python_input(doc):
    result = parse(doc, context())
    assert result.manifest is None and [p.path for p in result.refusals] == ["document"]


def test_utf8_bom_is_accepted():
    assert parse(b"\xef\xbb\xbf" + SHORTEST_YAML.encode(), context()).manifest is not None


def test_status_is_accepted_and_dropped():
    result = parse(m({"status": {"phase": "Running"}}), context())
    assert result.ok
    assert "status" not in result.manifest


def test_yaml_alias_bomb_in_inference_service_is_refused_not_expanded():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    bomb = "\n".join("        " + line for line in lines)
    text = (
        "apiVersion: servedeck.io/v1\nkind: Application\nspec:\n  name: a\n"
        "  profileName: prod-inference\n  source:\n    type: YAML\n    inferenceService:\n"
        "      apiVersion: serving.kserve.io/v1beta1\n      kind: InferenceService\n"
        "      spec:\n" + bomb + "\n"
    )
    result = parse(text, context())
    # Refused while reading, before anything expands it.
    assert [p.path for p in result.refusals] == ["document"]
    assert "aliases" in result.refusals[0].message


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        (
            {"serving.maxContext": 3},
            f"{P}.serving.maxContext",
            "unknown field; did you mean maxContextTokens?",
        ),
        ({"spec.profile": "x"}, "spec.profile", "did you mean profileName?"),
        ({"spec.Name": "x"}, "spec.Name", "did you mean name? (field names are case-sensitive)"),
        ({"resources.gpus": 1}, f"{P}.resources.gpus", "accepts the fields cpu, memory, accel"),
        ({"scaling.minReplica": 1}, f"{P}.scaling.minReplica", "did you mean minReplicas?"),
        ({"engine.tensor_parallel_size": 2}, f"{P}.engine.tensor_parallel_size", "did you mean"),
        ({"cache.enable": True}, f"{P}.cache.enable", "did you mean enabled?"),
        ({"minReplicas": 2}, f"{P}.minReplicas", "belongs in spec.source.model.scaling"),
        ({"spec.scaling": {"minReplicas": 2}}, "spec.scaling", "belongs in " + P + ".scaling"),
        ({"spec.zzz": 1}, "spec.zzz", "accepts the fields name, profileName, namespace"),
        ({"spec.source.model.qqq": 1}, f"{P}.qqq", "accepts the fields uri, format, runtime"),
        ({"kinds": "x"}, "kinds", "did you mean kind?"),
    ],
    ids=lambda v: v if isinstance(v, str) and "." in v and " " not in v else None,
)
def test_unknown_fields_name_the_path_and_the_closest_field(changes, path, message):
    result = parse(m(changes), context())
    matching = [p for p in result.refusals if p.path == path]
    assert matching and message in matching[0].message, [str(p) for p in result.refusals]


def test_non_text_keys_are_refused():
    doc = m({})
    doc["spec"][1] = "x"
    doc["spec"][None] = "y"
    result = parse(doc, context())
    assert {p.path for p in result.refusals} == {"spec.1", "spec.null"}
    assert all("is not a field name" in p.message for p in result.refusals)


def test_several_mistakes_are_reported_at_once():
    text = f"""\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: Bad_Name
  profileName: prod-inference
  syncType: sometimes
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3:{COMMIT}
      serving:
        maxContext: 4096
      resources:
        cpu: lots
        accelerator:
          gpu:
            countPerReplica: 2
            model: l40
      engine:
        tensorParallelSize: 4
        extraArgs: ["--dtype=half"]
      scaling:
        minReplicas: 3
        maxReplicas: 1
"""
    result = parse(text, context())
    paths = [p.path for p in result.refusals]
    assert sorted(paths) == sorted(
        [
            "spec.name",
            "spec.syncType",
            f"{P}.serving.maxContext",
            f"{P}.resources.cpu",
            f"{P}.resources.accelerator.gpu.model",
            f"{P}.engine.tensorParallelSize",
            f"{P}.engine.extraArgs[0]",
            f"{P}.scaling.maxReplicas",
        ]
    ), [str(p) for p in result.refusals]
    assert result.manifest is not None  # still built, so the dry run can show it


def test_wrong_type_does_not_cascade():
    """A count that is not a number skips the rules that compare against it."""
    result = parse(
        m(
            {
                "resources.accelerator": {"gpu": {"countPerReplica": "two"}},
                "engine.tensorParallelSize": 4,
            }
        ),
        context(),
    )
    assert [p.path for p in result.refusals] == [f"{P}.resources.accelerator.gpu.countPerReplica"]


def test_problem_api():
    problem = Problem("spec.name", "required", "refusal")
    assert str(problem) == "spec.name: required"
    assert problem.as_dict() == {
        "path": "spec.name",
        "message": "required",
        "level": "refusal",
        "origin": "rule",
    }
    result = parse(m({"spec.name": None, "uri": "hf://a/b"}), context())
    assert not result.ok
    assert result.problems() == [*result.refusals, *result.warnings]
    assert result.warnings and result.refusals


@pytest.mark.parametrize(
    ("changes", "runtime", "scaling", "generative"),
    [
        ({}, "vLLM (vllm runtime)", "fixed at 1 replica", True),
        ({"scaling.minReplicas": 2}, "vLLM (vllm runtime)", "fixed at 2 replicas", True),
        (
            {"scaling.maxReplicas": 4},
            "vLLM (vllm runtime)",
            "autoscales 1–4 replicas on requestsWaiting 2",
            True,
        ),
        (
            {"spec.profileName": "bare", "scaling.maxReplicas": 4},
            "vLLM (vllm runtime)",
            "autoscales 1–4 replicas on cpu 80%",
            True,
        ),
        (
            {"spec.profileName": "bare", "scaling.maxReplicas": 4, **GPU},
            "vLLM (vllm runtime)",
            "1–4 replicas, no autoscaler on GPU (stays at 1)",
            True,
        ),
        (
            {"uri": "hf://nvidia/parakeet-tdt-0.6b-v3"},
            "Parakeet speech-to-text (parakeet runtime)",
            "fixed at 1 replica",
            True,
        ),
        (
            {"uri": "s3://bkt/m", "format": "ONNX"},
            "NVIDIA Triton (triton runtime)",
            "fixed at 1 replica",
            False,
        ),
        (
            {"runtime.engine": "my-runtime"},
            "my-runtime (a serving runtime on the cluster, not installed by the platform)",
            "fixed at 1 replica",
            True,
        ),
        (
            {"runtime.isolation": "VirtualMachine"},
            "vLLM (vllm runtime), in KubeVirt virtual machines",
            "fixed at 1 replica",
            True,
        ),
    ],
)
def test_dry_run_descriptions(changes, runtime, scaling, generative):
    result = parse(m(changes), context())
    assert result.ok, result.refusals
    assert runtime_of(result.manifest) == runtime
    assert scaling_of(result.manifest) == scaling
    assert is_generative(result.manifest) is generative


@pytest.mark.parametrize("manifest", [None, {}, {"spec": 1}, [], {"spec": {"source": "x"}}])
def test_descriptions_never_raise(manifest):
    assert isinstance(runtime_of(manifest), str)
    assert isinstance(scaling_of(manifest), str)
    assert is_generative(manifest) is False
