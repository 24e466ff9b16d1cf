"""spec.source.model.adapters: LoRA adapters of a vLLM model, each its own model id, checked
by the manifest (names, uris, runtimes), and the flags and adapter_config.json rules of the
pure core (jobs.manifest.adapters)."""

from __future__ import annotations

import pytest

from jobs.manifest import parse
from jobs.manifest.adapters import MAX_ADAPTERS, MAX_RANK, config_problems, lora_args, names
from jobs.manifest.engine_flags import check_engine_args
from tests.jobs.manifest.manifest_support import COMMIT, context, m, profile

PINNED = f"hf://HuggingFaceTB/SmolLM2-135M-Instruct:{COMMIT}"
LORA = "hf://acme/smol-support-lora"
PATH = "spec.source.model.adapters"


def problems(adapters, level="refusals", **changes):
    result = parse(m({"uri": PINNED, "adapters": adapters, **changes}), context())
    return [(p.path, p.message) for p in getattr(result, level)]


def test_adapters_are_kept_in_the_filled_manifest_and_a_model_without_them_gets_none():
    given = [{"name": "support", "uri": LORA}]
    result = parse(m({"uri": PINNED, "adapters": given}), context())
    assert result.ok, result.refusals
    assert result.manifest["spec"]["source"]["model"]["adapters"] == given
    assert names(result.manifest) == ["support"]
    plain = parse(m({"uri": PINNED}), context())
    assert "adapters" not in plain.manifest["spec"]["source"]["model"]
    assert names(plain.manifest) == []


@pytest.mark.parametrize(
    ("adapters", "path", "phrase"),
    [
        ("support", PATH, "not a list of adapters"),
        ([{"name": "a", "uri": LORA}] * (MAX_ADAPTERS + 1), PATH, f"more than {MAX_ADAPTERS}"),
        (["support"], PATH, "item 0 is"),
        ([{"name": "a", "uri": LORA, "rank": 8}], PATH, "unknown field 'rank'"),
        ([{"uri": LORA}], f"{PATH}[0].name", "required, missing"),
        ([{"name": "Support_LoRA", "uri": LORA}], f"{PATH}[0].name", "not a DNS-1123 label"),
        ([{"name": "bge-embed", "uri": LORA}], f"{PATH}[0].name", "the base model's own id"),
        (
            [{"name": "a", "uri": LORA}, {"name": "a", "uri": LORA}],
            f"{PATH}[1].name",
            "also the name of adapters[0]",
        ),
        ([{"name": "a"}], f"{PATH}[0].uri", "required, missing"),
        ([{"name": "a", "uri": "ftp://x/y"}], f"{PATH}[0].uri", "ftp"),
        ([{"name": "a", "uri": "gs://bucket/lora"}], f"{PATH}[0].uri", "hf://, s3:// or file://"),
    ],
    ids=repr,
)
def test_each_adapter_is_refused_by_its_own_field(adapters, path, phrase):
    found = problems(adapters)
    assert any(p == path and phrase in msg for p, msg in found), found


def test_a_runtime_that_is_not_vllm_serves_no_adapter():
    found = problems(
        [{"name": "a", "uri": LORA}], **{"runtime.engine": "my-runtime", "format": "vLLM"}
    )
    assert [(p, "only vLLM serves LoRA adapters" in msg) for p, msg in found] == [(PATH, True)]
    found = problems([{"name": "a", "uri": LORA}], format="ONNX", uri="s3://bucket/model")
    assert any(p == PATH and "only vLLM" in msg for p, msg in found), found


def test_on_kubernetes_an_adapter_is_read_from_the_hubs_main_branch():
    found = problems([{"name": "a", "uri": "s3://bucket/lora/"}])
    assert [(p, "reads adapters from the Hugging Face Hub" in msg) for p, msg in found] == [
        (f"{PATH}[0].uri", True)
    ]
    # vLLM's --lora-modules takes no revision: a pinned one would not be what is served.
    found = problems([{"name": "a", "uri": f"hf://acme/lora:{COMMIT}"}])
    assert [(p, "loads an adapter's main branch" in msg) for p, msg in found] == [
        (f"{PATH}[0].uri", True)
    ]
    found = problems([{"name": "a", "uri": "hf://acme/lora"}], level="warnings")
    assert any(p == f"{PATH}[0].uri" and "main branch" in msg for p, msg in found), found


def test_on_the_local_profile_file_and_s3_adapters_pass_the_manifest():
    ctx = context(profiles={"local": profile("local", backend="local")})
    doc = m(
        {
            "spec.profileName": "local",
            "uri": PINNED,
            "adapters": [
                {"name": "a", "uri": "file:///models/lora-a"},
                {"name": "b", "uri": "s3://bucket/lora-b/"},
            ],
        }
    )
    result = parse(doc, ctx)
    assert not [p for p in result.refusals if p.path.startswith(PATH)], result.refusals


def test_the_platform_sets_the_lora_flags_and_extra_args_may_not():
    assert lora_args([]) == []
    assert lora_args([("a", "/d/a"), ("b", "/d/b")]) == [
        "--enable-lora",
        "--max-lora-rank",
        str(MAX_RANK),
        "--max-loras",
        "2",
        "--lora-modules",
        "a=/d/a",
        "b=/d/b",
    ]
    # vLLM reads an item with a comma as JSON: a folder whose path holds one goes that way.
    assert lora_args([("c", "/d/x=1,2")])[-1] == '{"name": "c", "path": "/d/x=1,2"}'
    for flag in ("--lora-modules=a=/x", "--enable-lora", "--max-lora-rank=8", "--max-loras=2"):
        assert check_engine_args([flag]), flag


BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
GOOD = {"peft_type": "LORA", "base_model_name_or_path": BASE, "r": 8, "target_modules": ["q_proj"]}


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({}, None),
        ({"base_model_name_or_path": "hf://huggingfacetb/smollm2-135m-instruct/"}, None),
        ({"base_model_name_or_path": "Qwen/Qwen3-0.6B"}, "trained on 'Qwen/Qwen3-0.6B'"),
        ({"r": MAX_RANK * 2}, f"is {MAX_RANK * 2}, above {MAX_RANK}"),
        ({"r": "8"}, "not a positive whole rank"),
        ({"target_modules": []}, "names no target_modules"),
        ({"peft_type": "PREFIX_TUNING"}, "LORA adapters only"),
    ],
    ids=repr,
)
def test_adapter_config_rules(change, phrase):
    found = config_problems({**GOOD, **change}, BASE, 2)
    if phrase is None:
        assert found == []
    else:
        assert len(found) == 1 and phrase in found[0], found
        assert found[0].startswith(f"{PATH}[2].uri: ")


def test_a_folder_base_is_compared_with_a_path_and_never_with_a_repo_id():
    config = {**GOOD, "base_model_name_or_path": "/models/smol/"}
    assert config_problems(config, "/models/smol", 0) == []
    assert "trained on '/models/smol/'" in config_problems(config, "/models/other", 0)[0]
    assert config_problems(GOOD, "/models/smol", 0) == []
    assert "not a JSON object" in config_problems([1], BASE, 0)[0]


def _doc(adapters, **model):
    return {"spec": {"name": "m", "source": {"model": {"uri": "u", **model, "adapters": adapters}}}}


@pytest.mark.parametrize(
    ("old", "new", "other", "swap"),
    [
        ([("a", "/a")], [("a", "/a"), ("b", "/b")], {}, ([], [("b", "/b")])),
        ([("a", "/a"), ("b", "/b")], [("b", "/b")], {}, (["a"], [])),
        ([("a", "/a")], [("a", "/a2")], {}, (["a"], [("a", "/a2")])),
        ([], [("a", "/a")], {}, None),  # started without LoRA: a restart gives it
        ([("a", "/a")], [], {}, None),  # left with none: restarted without it
        ([("a", "/a")], [("b", "/b")], {"format": "vLLM"}, None),  # something else changed
    ],
    ids=repr,
)
def test_which_adapter_changes_running_replicas_take_without_a_restart(old, new, other, swap):
    from jobs.manifest.adapters import runtime_swap

    before = _doc([{"name": n, "uri": p} for n, p in old])
    after = _doc([{"name": n, "uri": p} for n, p in new], **other)
    assert runtime_swap(before, after, old, new) == swap
