"""The rules on what Check model found about the model (pure): the runtime the format picks,
the model's own context limit, and the inputs it takes. They run once Check model has
answered: on the facts of the parse (parse.model_problems), or in the parse that fills the
defaults that depend on what it found (ctx.model, parse.refill_needed).
"""

from __future__ import annotations

from typing import Any

from .context import ModelFacts
from .defaults import MODEL_PATH as M
from .defaults import Facts, group, ok
from .model_defaults import context_over_limit
from .problems import Out, Problem, show
from .rules import MODALITY_FIELDS
from .schema import INSTALLED_RUNTIMES


def check_model_facts(draft: dict[str, Any], facts: Facts, model: ModelFacts) -> list[Problem]:
    """The rules on what Check model found, on the facts `check` ran on: the runtime the
    format picks, the model's own context limit, and the inputs it takes."""
    out = Out()
    source = draft["spec"]["source"]
    if not isinstance(source, dict) or source["type"] == "YAML":
        return []
    artifact = source["model"]
    if not isinstance(artifact, dict):
        return []
    _check_model(facts, model, out)
    if facts.generative and not facts.parakeet and not facts.custom_runtime:
        serving = group(artifact, "serving")
        _context_limit(serving, model, out)
        if _multimodal_passed(serving, facts):
            _modalities(serving, model, out)
    return out.problems


def _check_model(facts: Facts, model: ModelFacts, out: Out) -> None:
    """What Check model found must agree with the runtime format picks."""
    found = model.generative
    if found is None or facts.generative is None or found == facts.generative:
        return
    if found:
        out.refuse(
            f"{M}.format",
            f"{show(facts.format)} picks a predictive runtime, but Check model found a generative "
            "model; accepts vLLM for it. Set format to vLLM (or leave it out for hf://).",
        )
    else:
        out.refuse(
            f"{M}.format",
            "'vLLM' picks the vLLM runtime, but Check model found a predictive model that vLLM "
            "cannot serve; accepts the artifact's own format (SKLearn, XGBoost, ONNX, …). Set "
            "format to it.",
        )


def _context_limit(serving: dict[str, Any], model: ModelFacts, out: Out) -> None:
    limit = model.max_context_tokens
    tokens = serving.get("maxContextTokens")
    if ok(tokens) and context_over_limit(tokens, limit):
        out.refuse(
            f"{M}.serving.maxContextTokens",
            f"{show(tokens)} is above the model's own limit ({limit}), so the model would not "
            f"start; accepts 1 to {limit}. Set maxContextTokens to {limit} or less, or leave it "
            "out.",
        )


def _multimodal_passed(serving: dict[str, Any], facts: Facts) -> bool:
    """The multimodal block sets limits a platform runtime is given (else _multimodal refused
    it already)."""
    block = serving.get("multimodal")
    return (
        isinstance(block, dict)
        and any(value is not None for value in block.values())
        and (facts.engine is None or facts.engine in INSTALLED_RUNTIMES)
    )


def _modalities(serving: dict[str, Any], model: ModelFacts, out: Out) -> None:
    """Limits only for the inputs the model takes."""
    block = serving["multimodal"]
    modalities = model.modalities
    for key, modality in MODALITY_FIELDS.items():
        value = block.get(key)
        if ok(value) and modalities and modality not in modalities:
            out.refuse(
                f"{M}.serving.multimodal.{key}",
                f"{show(value)} is set but the model takes no {modality} input (it takes "
                f"{', '.join(sorted(modalities))}); accepts limits only for its inputs. "
                f"Remove {key}.",
            )
