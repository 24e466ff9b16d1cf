"""vLLM recipes: two real recipe shapes become model masters; broken ones name the key."""

import pytest

from jobs.machine_catalog import DEFAULT_MACHINE_CATALOG
from models_catalog.recipes import RecipeError, master_from_recipe, parse_recipe, split_flags

KINDS = {kind["name"]: kind for kind in DEFAULT_MACHINE_CATALOG}

# A single-GPU chat model with tool calling: arguments as a list, one override per GPU family.
LLAMA = """
meta:
  title: Llama 3.1 8B Instruct
  provider: Meta
model:
  model_id: meta-llama/Llama-3.1-8B-Instruct
  min_vllm_version: "0.6.0"
  docker_image: vllm/vllm-openai:v0.13.0
  base_args:
    - --max-model-len
    - "32768"
    - --tool-call-parser
    - llama3_json
    - --enable-auto-tool-choice
    - --enable-prefix-caching
  base_env:
    VLLM_USE_V1: "1"
variants:
  bf16:
    precision: bf16
    vram_minimum_gb: 20
  fp8:
    model_id: RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8
    precision: fp8
    vram_minimum_gb: 12
    extra_args: ["--kv-cache-dtype", "fp8"]
compatible_strategies: [single_gpu, tensor_parallel]
hardware_overrides:
  a100:
    extra_args: ["--max-num-batched-tokens", "8192"]
  h100:
    env:
      VLLM_ATTENTION_BACKEND: FLASHINFER
"""

# A large MoE reasoning model: arguments as one string, several GPUs needed.
DEEPSEEK = """
meta: {title: DeepSeek-R1}
model:
  model_id: deepseek-ai/DeepSeek-R1
  min_vllm_version: "0.8.0"
  docker_image: vllm/vllm-openai:v0.13.0
  base_args: "--trust-remote-code --reasoning-parser deepseek_r1 --gpu-memory-utilization=0.95"
variants:
  fp8:
    precision: fp8
    vram_minimum_gb: 720
compatible_strategies: [tensor_parallel, expert_parallel]
hardware_overrides:
  h200:
    extra_args: ["--enable-expert-parallel"]
"""


def test_llama_bf16_on_l4():
    draft = master_from_recipe(parse_recipe(LLAMA), "bf16", KINDS["l4"])
    f = draft.fields
    assert f["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert f["image"] == "vllm/vllm-openai:v0.13.0"
    assert f["dtype"] == "bfloat16" and f["quantization"] == ""
    assert f["tool_call_parser"] == "llama3_json" and f["max_context_tokens"] == 32768
    assert f["extra_args"] == ["--enable-prefix-caching"]  # auto tool choice is implied
    assert f["env"] == {"VLLM_USE_V1": "1"}
    assert f["tensor_parallel_size"] == 1  # 20 GB fits one 23 GiB L4
    assert "0.6.0" in f["notes"]


def test_llama_fp8_variant_with_a_family_override():
    draft = master_from_recipe(parse_recipe(LLAMA), "fp8", KINDS["a100-80gb"])
    f = draft.fields
    assert f["model_id"] == "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"
    assert f["quantization"] == "fp8"
    assert f["extra_args"] == [
        "--enable-prefix-caching",
        "--kv-cache-dtype",
        "fp8",
        "--max-num-batched-tokens",
        "8192",
    ]


def test_hardware_env_override():
    draft = master_from_recipe(parse_recipe(LLAMA), "bf16", KINDS["h100"])
    assert draft.fields["env"] == {"VLLM_USE_V1": "1", "VLLM_ATTENTION_BACKEND": "FLASHINFER"}


def test_deepseek_needs_eight_h200():
    recipe = parse_recipe(DEEPSEEK.replace("--trust-remote-code ", ""))
    draft = master_from_recipe(recipe, "fp8", KINDS["h200"])
    f = draft.fields
    assert f["tensor_parallel_size"] == 8  # 720 GB over 141 GiB GPUs: 6 -> the next power of two
    assert f["reasoning_parser"] == "deepseek_r1" and f["gpu_memory_utilization"] == 0.95
    assert f["extra_args"] == ["--enable-expert-parallel"]


def test_a_recipe_that_runs_the_repositorys_code_is_refused_naming_the_flag():
    # The platform never passes --trust-remote-code: a master holding it is not saved.
    with pytest.raises(RecipeError) as raised:
        master_from_recipe(parse_recipe(DEEPSEEK), "fp8", KINDS["h200"])
    assert raised.value.problems == [
        "extra_args[0]: '--trust-remote-code' is read as --trust-remote-code, which makes the "
        "server download or run code from elsewhere; accepts the flags the platform supports. "
        "Remove it."
    ]


def test_too_big_for_the_gpu_kind_says_what_to_pick():
    with pytest.raises(RecipeError) as raised:
        master_from_recipe(parse_recipe(DEEPSEEK), "fp8", KINDS["l4"])
    assert "variants.fp8.vram_minimum_gb" in raised.value.problems[0]
    assert "larger GPU kind" in raised.value.problems[0]


def test_unknown_variant_lists_the_variants():
    with pytest.raises(RecipeError, match="bf16, fp8"):
        master_from_recipe(parse_recipe(LLAMA), "int4", KINDS["l4"])


@pytest.mark.parametrize(
    "text, key",
    [
        ("model: [", "not valid YAML"),
        ("- a list", "must be a mapping"),
        ("variants: {a: {precision: bf16}}", "model.model_id"),
        ("model: {model_id: nope}\nvariants: {a: {precision: bf16}}", "model.model_id"),
        ("model: {model_id: a/b}", "variants: missing"),
        ("model: {model_id: a/b}\nvariants: {a: {precision: fp5}}", "variants.a.precision"),
        (
            "model: {model_id: a/b}\nvariants: {a: {precision: bf16, vram_minimum_gb: lots}}",
            "variants.a.vram_minimum_gb",
        ),
        (
            "model: {model_id: a/b, base_args: {x: 1}}\nvariants: {a: {precision: bf16}}",
            "model.base_args",
        ),
        (
            "model: {model_id: a/b}\nvariants: {a: {precision: bf16}}\n"
            "hardware_overrides: {h100: {flags: []}}",
            "hardware_overrides.h100.flags",
        ),
        (
            "model: {model_id: a/b, image: x}\nvariants: {a: {precision: bf16}}",
            "model.image: unknown",
        ),
        (
            "model: {model_id: a/b}\nvariants: {a: {precision: bf16}}\ncompatible_strategies: tp",
            "compatible_strategies",
        ),
    ],
)
def test_broken_recipes_name_the_key(text, key):
    with pytest.raises(RecipeError) as raised:
        parse_recipe(text)
    assert any(key in problem for problem in raised.value.problems), raised.value.problems


def test_all_problems_at_once():
    text = "model: {model_id: nope, colour: red}\nvariants: {a: {precision: fp5}}"
    with pytest.raises(RecipeError) as raised:
        parse_recipe(text)
    assert len(raised.value.problems) == 3


@pytest.mark.parametrize(
    "args, fields, rest",
    [
        (["-tp", "2", "--x"], {"tensor_parallel_size": "2"}, ["--x"]),
        (["--dtype=half", "--enforce-eager"], {"dtype": "half"}, ["--enforce-eager"]),
        (["--enable-auto-tool-choice"], {}, []),
        (["--served-model-name", "m"], {}, ["--served-model-name", "m"]),
    ],
)
def test_split_flags(args, fields, rest):
    assert split_flags(args) == (fields, rest)


def test_a_flag_without_its_value():
    with pytest.raises(RecipeError, match="has no value"):
        split_flags(["--max-model-len"])
