"""The entry point: read YAML or JSON text (or a mapping), check it, fill its defaults, and
answer with every refusal and warning at once. Never raises for any input.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import rules
from .context import ManifestContext
from .defaults import fill
from .problems import Problem, kind_of, show
from .schema import DOCUMENT, read

logger = logging.getLogger(__name__)

# libyaml's parser is several times faster than the pure-Python one; fall back quietly.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DOCUMENT_BYTES = 1024 * 1024  # a Kubernetes object cannot be larger than about this
DOCUMENT_PATH = "document"
INTERNAL_ERROR = "internal error while checking the manifest"


class DocumentError(ValueError):
    """The text is not a readable YAML/JSON document; problems say where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class ParseResult:
    manifest: dict[str, Any] | None
    refusals: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refusals

    def problems(self) -> list[Problem]:
        return [*self.refusals, *self.warnings]


def load_document(text: str | bytes) -> Any:
    """Parse YAML or JSON text into plain data; raises DocumentError naming line and column."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise DocumentError([_too_large(len(raw))])
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DocumentError(
                [
                    Problem(
                        DOCUMENT_PATH,
                        f"is not UTF-8 text (byte {exc.start} cannot be read); accepts YAML or "
                        "JSON in UTF-8. Save the file as UTF-8.",
                    )
                ]
            ) from None
    if len(text) > MAX_DOCUMENT_BYTES:
        raise DocumentError([_too_large(len(text))])
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text, object_pairs_hook=_unique_pairs)
        except (ValueError, RecursionError):
            pass  # YAML reads JSON too, and reports duplicates and errors with their place
    return _load_yaml(text)


def _too_large(size: int) -> Problem:
    return Problem(
        DOCUMENT_PATH,
        f"is {size} bytes; accepts at most {MAX_DOCUMENT_BYTES} bytes. A manifest this large "
        "is not one Application: check what was pasted.",
    )


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _load_yaml(text: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        duplicates: list[Problem] = []
        _find_duplicates(node, "", duplicates, set())
        if duplicates:
            raise DocumentError(duplicates)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise DocumentError([_syntax_problem(exc)]) from None
    except yaml.YAMLError as exc:
        raise DocumentError(
            [Problem(DOCUMENT_PATH, f"is not valid YAML or JSON ({exc}); fix the syntax.")]
        ) from None
    except RecursionError:
        raise DocumentError(
            [Problem(DOCUMENT_PATH, "is nested too deeply to be a manifest; accepts YAML or JSON.")]
        ) from None
    finally:
        loader.dispose()


def _syntax_problem(exc: yaml.MarkedYAMLError) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = exc.problem or "cannot be read"
    if exc.context and "expected a single document" in exc.context:
        return Problem(
            DOCUMENT_PATH,
            f"{where}holds more than one YAML document ('---'); accepts one Application per "
            "manifest. Keep one document.",
        )
    context = f" ({exc.context})" if exc.context else ""
    return Problem(
        DOCUMENT_PATH,
        f"{where}{what}{context}; accepts YAML or JSON. Fix the syntax there (check the "
        "indentation and quotes).",
    )


def _find_duplicates(node: Any, path: str, out: list[Problem], seen: set[int]) -> None:
    """Duplicate keys silently lose a value in YAML; report them with both lines."""
    if id(node) in seen or len(out) >= 20:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            child = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and key != "<<":
                line = key_node.start_mark.line + 1
                if key in lines:
                    out.append(
                        Problem(
                            child,
                            f"is given twice (lines {lines[key]} and {line}); YAML would keep "
                            "only the last. Keep one of them.",
                        )
                    )
                else:
                    lines[key] = line
            _find_duplicates(value_node, child, out, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _find_duplicates(item, f"{path}[{index}]", out, seen)


def parse(doc: str | bytes | Mapping[str, Any], ctx: ManifestContext) -> ParseResult:
    """Check a manifest, fill in its defaults, and report every problem.

    Never raises: whatever the input, every issue comes back as a Problem.
    """
    try:
        return _parse(doc, ctx if ctx is not None else ManifestContext(profiles={}))
    except Exception:  # noqa: BLE001 - the contract is "never raises"; the log keeps the bug
        logger.exception("manifest.parse failed on its input")
        return ParseResult(
            None,
            [Problem(DOCUMENT_PATH, f"{INTERNAL_ERROR}; the input was not changed. Report it.")],
        )


def _parse(doc: Any, ctx: ManifestContext) -> ParseResult:
    if isinstance(doc, (str, bytes, bytearray, memoryview)):
        try:
            data = load_document(doc)
        except DocumentError as exc:
            return ParseResult(None, list(exc.problems))
    else:
        data = doc
    if not isinstance(data, Mapping):
        if data is None:
            what = "empty"
        elif isinstance(data, (list, tuple)):
            what = "a list"
        else:
            what = f"{show(data)} ({kind_of(data)})"
        return ParseResult(
            None,
            [
                Problem(
                    DOCUMENT_PATH,
                    f"is {what}, not a mapping; accepts a mapping with apiVersion, kind and "
                    "spec. Start from the shortest manifest: apiVersion: servedeck.io/v1, kind: "
                    "Application, spec: {name, profileName, source}.",
                )
            ],
        )
    problems: list[Problem] = []
    draft = read(DOCUMENT, data, "", problems)
    manifest, facts = fill(draft, ctx)
    problems.extend(facts.master_problems)
    if manifest is not None:
        problems.extend(rules.check(draft, facts, manifest, ctx))
    unique = list(dict.fromkeys(problems))
    return ParseResult(
        manifest,
        [p for p in unique if p.level == "refusal"],
        [p for p in unique if p.level == "warning"],
    )
