"""The entry point: read YAML or JSON text (or a mapping), check it, fill its defaults, and
answer with every refusal and warning at once. Never raises for any input.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import model_rules, rules
from .bounded import MANIFEST_LIMITS, DocumentError, load_bounded, nul_problems
from .context import ManifestContext, ModelFacts
from .defaults import Facts, fill
from .model_defaults import model_defaults
from .problems import Problem, kind_of, show
from .schema import DOCUMENT, read

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = MANIFEST_LIMITS.max_bytes
DOCUMENT_PATH = "document"
INTERNAL_ERROR = "internal error while checking the manifest"


@dataclass(frozen=True)
class ParseResult:
    manifest: dict[str, Any] | None
    refusals: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    # The well-typed document and its effective values, for the rules that run once Check
    # model has read the model (model_problems): the same facts, and a second fill (refill,
    # the document is not read again) only when what it found changes a default
    # (refill_needed).
    draft: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    facts: Facts | None = field(default=None, repr=False, compare=False)
    # The problems of reading the document's shape, which a refill keeps.
    shape: list[Problem] = field(default_factory=list, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.refusals

    def problems(self) -> list[Problem]:
        return [*self.refusals, *self.warnings]

    def with_problems(self, problems: list[Problem]) -> ParseResult:
        """This result with more problems, each in its list."""
        return replace(
            self,
            refusals=[*self.refusals, *(p for p in problems if p.level == "refusal")],
            warnings=[*self.warnings, *(p for p in problems if p.level == "warning")],
        )


def model_problems(result: ParseResult, model: ModelFacts) -> list[Problem]:
    """The rules that depend on what Check model found (format against the model's kind, the
    context limit, the modalities), on the facts `result` was filled with."""
    if result.manifest is None or result.draft is None or result.facts is None:
        return []
    return model_rules.check_model_facts(result.draft, result.facts, model)


def refill_needed(result: ParseResult, model: ModelFacts) -> bool:
    """Whether what Check model found changes a default `result` was filled with (the context
    window, the memory that holds the model, the pinned commit): then the manifest is filled
    again with it (refill with ctx.model), so every rule sees the values that will run."""
    if result.facts is None or result.facts.model_asked is None:
        return False
    return model_defaults(result.facts.model_asked, model) != result.facts.model_filled


def refill(result: ParseResult, ctx: ManifestContext) -> ParseResult:
    """`result` filled and checked again with `ctx` (ctx.model: what Check model found), from
    the document it read: the document is read once, whatever Check model changes. Never
    raises, as parse."""
    if result.draft is None:
        return result
    try:
        return _fill(result.draft, result.shape, ctx)
    except Exception:  # noqa: BLE001 - the contract is "never raises"; the log keeps the bug
        logger.exception("manifest.refill failed on its input")
        return _internal_error()


def load_document(text: str | bytes) -> Any:
    """Parse YAML or JSON text into plain data; raises DocumentError naming line and column.
    Bounded in size, depth, nodes and aliases (see bounded.py)."""
    return load_bounded(text, DOCUMENT_PATH, MANIFEST_LIMITS)


def parse(doc: str | bytes | Mapping[str, Any], ctx: ManifestContext) -> ParseResult:
    """Check a manifest, fill in its defaults, and report every problem.

    Never raises: whatever the input, every issue comes back as a Problem.
    """
    try:
        return _parse(doc, ctx if ctx is not None else ManifestContext(profiles={}))
    except Exception:  # noqa: BLE001 - the contract is "never raises"; the log keeps the bug
        logger.exception("manifest.parse failed on its input")
        return _internal_error()


def _internal_error() -> ParseResult:
    return ParseResult(
        None, [Problem(DOCUMENT_PATH, f"{INTERNAL_ERROR}; the input was not changed. Report it.")]
    )


def not_a_mapping(data: Any) -> Problem | None:
    """The refusal of a document that was read but is not a mapping (empty, a list, a lone
    value such as one quoted string), else None."""
    if isinstance(data, Mapping):
        return None
    if data is None:
        what = "empty"
    elif isinstance(data, (list, tuple)):
        what = "a list"
    else:
        what = f"{show(data)} ({kind_of(data)})"
    return Problem(
        DOCUMENT_PATH,
        f"is {what}, not a mapping; accepts a mapping with apiVersion, kind and "
        "spec. Start from the shortest manifest: apiVersion: servedeck.io/v1, kind: "
        "Application, spec: {name, profileName, source}.",
        origin="schema",
    )


def _parse(doc: Any, ctx: ManifestContext) -> ParseResult:
    if isinstance(doc, (str, bytes, bytearray, memoryview)):
        try:
            data = load_document(doc)
        except DocumentError as exc:
            return ParseResult(None, _schema(exc.problems))
    else:
        data = doc
    if nul := nul_problems(data):
        return ParseResult(None, _schema(nul))
    if (problem := not_a_mapping(data)) is not None:
        return ParseResult(None, [problem])
    shape: list[Problem] = []
    draft = read(DOCUMENT, data, "", shape)
    return _fill(draft, _schema(shape), ctx)


def _fill(draft: Any, shape: list[Problem], ctx: ManifestContext) -> ParseResult:
    """Fill the defaults of a document read into `draft`, then check it (`shape`: the problems
    the read found)."""
    problems = list(shape)
    manifest, facts = fill(draft, ctx)
    problems.extend(facts.master_problems)
    if manifest is not None:
        problems.extend(rules.check(draft, facts, manifest, ctx))
        if ctx.model is not None:
            problems.extend(model_rules.check_model_facts(draft, facts, ctx.model))
    return ParseResult(
        manifest,
        [p for p in problems if p.level == "refusal"],
        [p for p in problems if p.level == "warning"],
        draft=draft if manifest is not None else None,
        facts=facts if manifest is not None else None,
        shape=shape,
    )


def _schema(problems: list[Problem]) -> list[Problem]:
    return [replace(p, origin="schema") for p in problems]
