"""The terminal end of every verb: what it prints (stdout, stderr, JSON), and a read verb's
answer as JSON or a table."""

from __future__ import annotations

import sys
from typing import Any

from servedeck import present
from servedeck.console import EXIT_OK

# Everything the console, the gateway or a model sent reaches the terminal through these three,
# made safe by present.terminal_safe (newlines and tabs kept, other control characters shown).


def write(text: str) -> None:
    """`text` as it is (its own newlines), e.g. a rendered document or a transcript."""
    sys.stdout.write(present.terminal_safe(text))
    sys.stdout.flush()


def out(line: str = "") -> None:
    print(present.terminal_safe(line), flush=True)


def err(line: str) -> None:
    print(present.terminal_safe(line), file=sys.stderr, flush=True)


def lines(found) -> None:
    for line in found:
        out(line)


def show_json(value: Any) -> None:
    out(present.dump(value, "json"))


def output_of(args, default: str | None = None) -> str | None:
    return "json" if getattr(args, "as_json", False) else (args.output or default)


def table_or_json(args, found, rows) -> int:
    """A read verb's answer: the console's JSON with --json, else its rows as a table."""
    if args.as_json:
        show_json(found)
    else:
        lines(present.table_lines(rows(found)))
    return EXIT_OK
