"""The one reader of YAML and JSON text that users send: bounded in size, nesting depth, node
count and alias expansion, so no text crashes, hangs or exhausts the process.

libyaml's C composer recurses once per nesting level without Python's guard: a 100 KB run of
`[` overflows the C stack and kills the process. Its parser, though, keeps an explicit stack,
so the text is first read as a stream of events, which costs little and cannot crash: depth,
nodes, aliases and the size the aliases expand to are counted there, and only text within the
limits is composed. JSON text is scanned for its bracket depth before `json.loads`.

`load_bounded(text, field=..., limits=...)` is the entry point; it raises DocumentError whose
problems name the field, say what is accepted and never quote more than a few characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from .problems import Problem, child_path

# libyaml's parser is several times faster than the pure-Python one; fall back quietly.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Limits:
    """What a text may hold. The defaults suit a manifest; forms pass smaller ones."""

    max_bytes: int = 1024 * 1024  # a Kubernetes object cannot be larger than about this
    max_depth: int = 64  # a manifest nests about 8 levels
    max_nodes: int = 100_000  # scalars and collections, aliases counted as expanded
    max_aliases: int = 100  # references (*name) in one document
    max_expanded_bytes: int = 2 * 1024 * 1024  # scalar text, aliases counted as expanded
    what: str = "a manifest"  # for messages: "is nested too deeply to be {what}"
    hint: str = "check what was pasted"  # what to do, after a limit


MANIFEST_LIMITS = Limits()


class DocumentError(ValueError):
    """The text is not a readable YAML/JSON document; problems say where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def load_bounded(
    text: str | bytes, field: str = "document", limits: Limits = MANIFEST_LIMITS
) -> Any:
    """Parse YAML or JSON text into plain data within `limits`.

    Raises DocumentError naming `field` (and line and column for syntax errors); never
    anything else, whatever the text.
    """
    text = _as_text(text, field, limits)
    if text.lstrip().startswith(("{", "[")) and _json_depth(text) <= limits.max_depth:
        try:
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        except (ValueError, RecursionError):
            pass  # YAML reads JSON too, and reports duplicates and errors with their place
        else:
            _check_json_nodes(data, field, limits)
            return data
    return _load_yaml(text, field, limits)


def _as_text(text: str | bytes, field: str, limits: Limits) -> str:
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if len(raw) > limits.max_bytes:
            raise DocumentError([_too_large(field, len(raw), limits)])
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DocumentError(
                [
                    Problem(
                        field,
                        f"is not UTF-8 text (byte {exc.start} cannot be read); accepts YAML or "
                        "JSON in UTF-8. Save the file as UTF-8.",
                    )
                ]
            ) from None
    if not isinstance(text, str):
        raise DocumentError([Problem(field, "is not text; accepts YAML or JSON text.")])
    # Characters, not bytes, for text already decoded: a cheap bound that is close enough.
    if len(text) > limits.max_bytes:
        raise DocumentError([_too_large(field, len(text), limits)])
    return text


def _too_large(field: str, size: int, limits: Limits) -> Problem:
    return Problem(
        field,
        f"is {size} bytes; accepts at most {limits.max_bytes} bytes. This is too large to be "
        f"{limits.what}: {limits.hint}.",
    )


def _limit(field: str, what: str, limits: Limits) -> DocumentError:
    return DocumentError([Problem(field, f"{what}; {limits.hint}.")])


def _too_deep(field: str, limits: Limits) -> DocumentError:
    return _limit(
        field,
        f"is nested more than {limits.max_depth} levels deep, too deep to be {limits.what}; "
        f"accepts at most {limits.max_depth} levels",
        limits,
    )


def _json_depth(text: str) -> int:
    """The deepest bracket nesting of JSON text, strings skipped; stops counting past 10**6."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif char in "]}":
            depth -= 1
    return deepest


def _check_json_nodes(data: Any, field: str, limits: Limits) -> None:
    """JSON has no aliases and its depth was scanned; only the node count is left to bound."""
    count = 0
    pending = [data]
    while pending:
        value = pending.pop()
        count += 1
        if count > limits.max_nodes:
            raise _limit(
                field,
                f"holds more than {limits.max_nodes} values, too many for {limits.what}; "
                f"accepts at most {limits.max_nodes}",
                limits,
            )
        if isinstance(value, dict):
            pending.extend(value.values())
            count += len(value)  # the keys
        elif isinstance(value, list):
            pending.extend(value)


def nul_problems(data: Any, most: int = 5) -> list[Problem]:
    """A refusal for each string (key or value) holding a NUL character, by its path: no field
    accepts one, and a database cannot store it (PostgreSQL refuses it even in a lookup), so a
    document holding one is refused before any of it is used. `data` is already bounded."""
    found: list[Problem] = []
    pending: list[tuple[str, Any]] = [("", data)]
    while pending and len(found) < most:
        path, value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                found.append(
                    Problem(
                        path or "document",
                        "contains a NUL character (\\0); accepts text without control "
                        "characters. Remove it and send the manifest again.",
                    )
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                key_path = child_path(path, key)
                if isinstance(key, str) and "\x00" in key:
                    pending.append((path or "document", key))
                else:
                    pending.append((key_path, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return found


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _load_yaml(text: str, field: str, limits: Limits) -> Any:
    try:
        _check_events(text, field, limits)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            duplicates: list[Problem] = []
            _find_duplicates(node, duplicates)
            if duplicates:
                raise DocumentError(duplicates)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise DocumentError([_syntax_problem(field, exc)]) from None
    except yaml.YAMLError as exc:
        raise DocumentError(
            [Problem(field, f"is not valid YAML or JSON ({_short(str(exc))}); fix the syntax.")]
        ) from None
    except RecursionError:  # a bound above should have stopped it first; never crash on it
        raise _too_deep(field, limits) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # The constructor's own refusals (a date like 2024-99-99, a bad base64 binary).
        if isinstance(exc, DocumentError):
            raise
        raise DocumentError(
            [Problem(field, f"holds a value YAML cannot read ({_short(str(exc))}); fix it.")]
        ) from None


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _check_events(text: str, field: str, limits: Limits) -> None:
    """Walk the parser's events (an explicit stack in libyaml, so any depth is safe) and stop
    at the first limit passed. Sizes of anchored nodes are remembered so that each alias
    counts as the nodes and bytes it stands for: a 1 KB alias bomb expands to billions."""
    depth = 0
    nodes = 0
    size = 0
    aliases = 0
    # Per open collection: (anchor, nodes at its start, bytes at its start).
    open_: list[tuple[str | None, int, int]] = []
    anchored: dict[str, tuple[int, int]] = {}
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > limits.max_depth:
                raise _too_deep(field, limits)
            open_.append((event.anchor, nodes, size))
            nodes += 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            anchor, nodes_before, size_before = open_.pop()
            if anchor is not None:
                anchored[anchor] = (nodes - nodes_before, size - size_before)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            size += len(event.value)
            if event.anchor is not None:
                anchored[event.anchor] = (1, len(event.value))
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > limits.max_aliases:
                raise _limit(
                    field,
                    f"uses more than {limits.max_aliases} aliases (*name); accepts at most "
                    f"{limits.max_aliases}. Write the values out instead",
                    limits,
                )
            if any(anchor == event.anchor for anchor, _, _ in open_):
                # A value that holds itself cannot be stored or sent as JSON.
                raise _limit(
                    field,
                    f"refers to itself (the alias *{_short(str(event.anchor), 40)} is inside "
                    "its own anchor); accepts values that do not contain themselves. Write the "
                    "value out instead",
                    limits,
                )
            more_nodes, more_size = anchored.get(event.anchor, (1, 0))
            nodes += more_nodes
            size += more_size
        else:
            continue
        if nodes > limits.max_nodes:
            raise _limit(
                field,
                f"holds more than {limits.max_nodes} values (aliases counted as what they "
                f"repeat), too many for {limits.what}; accepts at most {limits.max_nodes}",
                limits,
            )
        if size > limits.max_expanded_bytes:
            raise _limit(
                field,
                f"expands to more than {limits.max_expanded_bytes} bytes of values (aliases "
                f"counted as what they repeat), too much for {limits.what}; accepts at most "
                f"{limits.max_expanded_bytes}",
                limits,
            )


def _syntax_problem(field: str, exc: yaml.MarkedYAMLError) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = _short(exc.problem or "cannot be read")
    if exc.context and "expected a single document" in exc.context:
        return Problem(
            field,
            f"{where}holds more than one YAML document ('---'); accepts one document. Keep one.",
        )
    context = f" ({_short(exc.context)})" if exc.context else ""
    return Problem(
        field,
        f"{where}is not valid YAML: {what}{context}; accepts YAML or JSON. Fix the syntax "
        "there (check the indentation and quotes).",
    )


def _find_duplicates(node: Any, out: list[Problem]) -> None:
    """Duplicate keys silently lose a value in YAML; report them with both lines. Iterative,
    and each node once (aliases share nodes)."""
    seen: set[int] = set()
    pending = [(node, "")]
    while pending and len(out) < 20:
        node, path = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            children = []
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                child = child_path(path, str(key))
                if isinstance(key, str) and key != "<<":
                    line = key_node.start_mark.line + 1
                    if key in lines:
                        out.append(
                            Problem(
                                child,
                                f"is given twice (lines {lines[key]} and {line}); YAML would "
                                "keep only the last. Keep one of them.",
                            )
                        )
                    else:
                        lines[key] = line
                children.append((value_node, child))
            pending.extend(reversed(children))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(
                (item, f"{path}[{index}]") for index, item in reversed(list(enumerate(node.value)))
            )
