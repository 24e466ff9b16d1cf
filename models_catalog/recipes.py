"""Read a vLLM recipe (YAML) and turn one variant on one GPU kind into a model master's fields.

A recipe: `meta`, `model.{model_id, min_vllm_version, docker_image, base_args, base_env}`,
`variants.<name>.{precision, vram_minimum_gb, extra_args}`, `compatible_strategies` and
`hardware_overrides.<gpu>.{extra_args, env}`. Errors name the key at fault.
"""

import math
import shlex
from dataclasses import dataclass, field

from jobs.manifest.bounded import DocumentError, Limits, load_bounded
from jobs.manifest.problems import kind_of, show
from jobs.manifest.quantity import parse_quantity
from models_catalog.master_checks import args_problems, env_problems

TOP_KEYS = {"meta", "model", "variants", "compatible_strategies", "hardware_overrides"}
MODEL_KEYS = {"model_id", "min_vllm_version", "docker_image", "base_args", "base_env"}
VARIANT_KEYS = {"precision", "vram_minimum_gb", "extra_args", "model_id", "description"}
OVERRIDE_KEYS = {"extra_args", "env"}
GB = 10**9
# A vLLM recipe is a short YAML file (a few KB): bounded well below a manifest.
MAX_RECIPE_BYTES = 256 * 1024
RECIPE_LIMITS = Limits(
    max_bytes=MAX_RECIPE_BYTES,
    max_depth=16,
    max_nodes=20_000,
    max_aliases=50,
    max_expanded_bytes=512 * 1024,
    what="a vLLM recipe",
    hint="a recipe is a short YAML file; check that this is one",
)

# precision -> (dtype, quantization) the engine is started with
PRECISIONS = {
    "bf16": ("bfloat16", ""),
    "bfloat16": ("bfloat16", ""),
    "fp16": ("float16", ""),
    "float16": ("float16", ""),
    "fp32": ("float32", ""),
    "fp8": ("", "fp8"),
    "awq": ("", "awq"),
    "int4-awq": ("", "awq"),
    "gptq": ("", "gptq"),
    "int4-gptq": ("", "gptq"),
    "int8": ("", "bitsandbytes"),
    # Weights already stored quantised: the checkpoint says how, nothing to pass.
    "mxfp4": ("", ""),
    "nvfp4": ("", ""),
    "auto": ("", ""),
}
# Engine flags that have a field of their own in a model master.
FIELD_FLAGS = {
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "-pp": "pipeline_parallel_size",
    "--dtype": "dtype",
    "--quantization": "quantization",
    "-q": "quantization",
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--max-model-len": "max_context_tokens",
    "--gpu-memory-utilization": "gpu_memory_utilization",
}
INT_FIELDS = {"tensor_parallel_size", "pipeline_parallel_size", "max_context_tokens"}
# Implied by a tool-call parser; the renderer adds it.
DROPPED_FLAGS = {"--enable-auto-tool-choice"}


class RecipeError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Recipe:
    model_id: str
    docker_image: str
    min_vllm_version: str
    base_args: list[str]
    base_env: dict
    variants: dict
    strategies: list[str]
    overrides: dict
    title: str = ""


@dataclass
class MasterDraft:
    """The fields of a model master, and what the conversion had to decide."""

    fields: dict
    notes: list[str] = field(default_factory=list)


def _args(value, key: str, problems: list[str]) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as error:
            problems.append(f"{key}: {error}; quote arguments as a shell would.")
            return []
    if isinstance(value, list) and all(isinstance(a, str | int | float) for a in value):
        return [str(a) for a in value]
    problems.append(f"{key}: {show(value)} is not a list of arguments; write a list of strings.")
    return []


def _mapping(value, key: str, problems: list[str]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key}: {kind_of(value)} given; a mapping is needed.")
        return {}
    return value


def _unknown(data: dict, allowed: set, where: str, problems: list[str]) -> None:
    for key in sorted(set(data) - allowed, key=str):
        problems.append(
            f"{where}{str(key)[:60]}: unknown key; accepted: {', '.join(sorted(allowed))}."
        )


def parse_recipe(text: str) -> Recipe:
    """The recipe in `text`, or a RecipeError listing every problem with its key."""
    try:
        data = load_bounded(text, "recipe", RECIPE_LIMITS)
    except DocumentError as error:
        raise RecipeError([str(p) for p in error.problems]) from None
    if not isinstance(data, dict):
        raise RecipeError(["recipe: the document must be a mapping with model and variants."])
    problems: list[str] = []
    _unknown(data, TOP_KEYS, "", problems)
    model = _mapping(data.get("model"), "model", problems)
    _unknown(model, MODEL_KEYS, "model.", problems)
    model_id = model.get("model_id")
    if not isinstance(model_id, str) or model_id.count("/") != 1:
        problems.append(
            f"model.model_id: {show(model_id)}; give the Hugging Face repo as org/name."
        )
    variants = _mapping(data.get("variants"), "variants", problems)
    if not variants and "variants" not in data:
        problems.append("variants: missing; list at least one variant with its precision.")
    for name, variant in variants.items():
        where = f"variants.{name}."
        variant = _mapping(variant, f"variants.{name}", problems)
        _unknown(variant, VARIANT_KEYS, where, problems)
        precision = str(variant.get("precision", "")).lower()
        if precision not in PRECISIONS:
            problems.append(
                f"{where}precision: {show(variant.get('precision'))}; accepted: "
                f"{', '.join(sorted(PRECISIONS))}."
            )
        vram = variant.get("vram_minimum_gb")
        if vram is not None and (
            isinstance(vram, bool) or not isinstance(vram, int | float) or vram <= 0
        ):
            problems.append(
                f"{where}vram_minimum_gb: {show(vram)}; give GPU memory in GB, e.g. 24."
            )
        _args(variant.get("extra_args"), f"{where}extra_args", problems)
    overrides = _mapping(data.get("hardware_overrides"), "hardware_overrides", problems)
    for gpu, override in overrides.items():
        override = _mapping(override, f"hardware_overrides.{gpu}", problems)
        _unknown(override, OVERRIDE_KEYS, f"hardware_overrides.{gpu}.", problems)
        _args(override.get("extra_args"), f"hardware_overrides.{gpu}.extra_args", problems)
    strategies = data.get("compatible_strategies") or []
    if not isinstance(strategies, list) or not all(isinstance(s, str) for s in strategies):
        problems.append(
            f"compatible_strategies: {show(strategies)}; give a list of strategy names."
        )
        strategies = []
    base_args = _args(model.get("base_args"), "model.base_args", problems)
    base_env = _mapping(model.get("base_env"), "model.base_env", problems)
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    if problems:
        raise RecipeError(problems)
    return Recipe(
        model_id=model_id,
        docker_image=str(model.get("docker_image") or ""),
        min_vllm_version=str(model.get("min_vllm_version") or ""),
        base_args=base_args,
        base_env={str(k): str(v) for k, v in base_env.items()},
        variants=variants,
        strategies=strategies,
        overrides={str(k).lower(): v or {} for k, v in overrides.items()},
        title=str(meta.get("title") or ""),
    )


def split_flags(args: list[str]) -> tuple[dict, list[str]]:
    """Engine flags that have a master field, and the rest as they were given."""
    fields, rest, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        name, _, inline = arg.partition("=")
        if name in DROPPED_FLAGS:
            i += 1
            continue
        if name in FIELD_FLAGS:
            if inline:
                value, i = inline, i + 1
            elif i + 1 < len(args):
                value, i = args[i + 1], i + 2
            else:
                raise RecipeError([f"{name}: the flag has no value; give one, e.g. {name} 2."])
            fields[FIELD_FLAGS[name]] = value
            continue
        rest.append(arg)
        i += 1
    return fields, rest


def _override_for(recipe: Recipe, gpu_kind: str) -> dict:
    """A hardware override named like the GPU kind: `h100`, or `a100` for `a100-80gb`."""
    kind = gpu_kind.lower()
    if kind in recipe.overrides:
        return recipe.overrides[kind]
    family = kind.split("-")[0]
    return recipe.overrides.get(family, {})


def master_from_recipe(recipe: Recipe, variant_name: str, gpu_kind: dict) -> MasterDraft:
    """A model master for `variant_name` on `gpu_kind` (a machine catalog entry)."""
    if variant_name not in recipe.variants:
        raise RecipeError(
            [
                f"variant: {show(variant_name)} is not in this recipe; pick one of "
                f"{', '.join(recipe.variants)}."
            ]
        )
    variant = recipe.variants[variant_name]
    override = _override_for(recipe, gpu_kind["name"])
    args = (
        recipe.base_args
        + _args(variant.get("extra_args"), "", [])
        + _args(override.get("extra_args"), "", [])
    )
    flags, extra = split_flags(args)
    dtype, quantization = PRECISIONS[str(variant.get("precision", "auto")).lower()]
    fields = {
        "model_id": variant.get("model_id") or recipe.model_id,
        "runtime": "vllm",
        "image": recipe.docker_image,
        "dtype": dtype,
        "quantization": quantization,
        "extra_args": extra,
        "env": {
            **recipe.base_env,
            **{str(k): str(v) for k, v in (override.get("env") or {}).items()},
        },
        "source": "recipe",
    }
    for key, value in flags.items():
        if key in INT_FIELDS:
            try:
                fields[key] = int(value)
            except ValueError:
                raise RecipeError([f"{key}: {show(value)} is not a whole number."]) from None
        elif key == "gpu_memory_utilization":
            try:
                fields[key] = float(value)
            except ValueError:
                raise RecipeError([f"{key}: {show(value)} is not a number."]) from None
        else:
            fields[key] = value
    notes = _size_for(recipe, variant_name, variant, gpu_kind, fields)
    # The master is checked as the form checks one: its arguments by the manifest's rule.
    problems = args_problems(extra) + env_problems(fields["env"])
    if problems:
        raise RecipeError(problems)
    title = recipe.title or recipe.model_id
    notes.insert(0, f"From the vLLM recipe {title}, variant {variant_name}, on {gpu_kind['name']}.")
    if recipe.min_vllm_version:
        notes.append(f"Needs vLLM {recipe.min_vllm_version} or later.")
    fields["notes"] = " ".join(notes)
    return MasterDraft(fields=fields, notes=notes)


def _size_for(recipe, variant_name, variant, gpu_kind, fields) -> list[str]:
    """Pick the tensor-parallel size the variant's memory needs on this GPU kind."""
    vram_gb = variant.get("vram_minimum_gb")
    if vram_gb is None or "tensor_parallel_size" in fields:
        return []
    per_gpu = int(parse_quantity(str(gpu_kind["gpuMemory"])))
    per_node = int(gpu_kind.get("gpusPerNode", 1))
    needed = math.ceil(vram_gb * GB / per_gpu)
    tp = 1 << max(needed - 1, 0).bit_length()  # the next power of two: heads divide evenly
    if tp > per_node:
        raise RecipeError(
            [
                f"variants.{variant_name}.vram_minimum_gb: {vram_gb} GB needs {tp} "
                f"{gpu_kind['name']} "
                f"GPUs, and its nodes have {per_node}; pick a larger GPU kind or another variant."
            ]
        )
    if tp > 1 and recipe.strategies and "tensor_parallel" not in recipe.strategies:
        raise RecipeError(
            [
                f"compatible_strategies: {vram_gb} GB needs {tp} {gpu_kind['name']} GPUs, and the "
                "recipe does not list tensor_parallel; pick a GPU kind with more memory."
            ]
        )
    fields["tensor_parallel_size"] = tp
    return [f"{vram_gb} GB of GPU memory: {tp} × {gpu_kind['name']}."]
