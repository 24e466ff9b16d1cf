"""The verbs that call a model through the gateway with an API key: chat, complete, embed
and transcribe."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from servedeck import present
from servedeck.console import EXIT_OK, UsageError
from servedeck.contexts import check_url, chosen_context, env_allows_http
from servedeck.terminal import err, lines, show_json, write


def gateway_for(args):
    from servedeck.gateway import Gateway  # openai loads only for the verbs that call a model

    key = args.key or os.environ.get("SERVEDECK_API_KEY")
    if not key:
        raise UsageError(
            "No API key: pass --key sdk_… or set SERVEDECK_API_KEY (servedeck key create NAME "
            "makes one)."
        )
    override = os.environ.get("SERVEDECK_GATEWAY_URL")  # gateway processes of their own
    if override:
        base = check_url(override, env_allows_http())
    else:
        base = chosen_context(args)[1].url + "/v1"
    return Gateway(base, key, timeout=args.timeout if args.timeout_given else 600.0)


def _chat_options(args) -> dict:
    options: dict[str, Any] = {}
    if args.max_tokens is not None:
        options["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        options["temperature"] = args.temperature
    return options


def do_chat(args) -> int:
    from servedeck.gateway import write_stream

    gateway = gateway_for(args)
    messages: list[dict] = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt:
        messages.append({"role": "user", "content": " ".join(args.prompt)})
        write_stream(gateway.chat(args.model, messages, **_chat_options(args)))
        return EXIT_OK
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 (line editing and the session's history of prompts)
        err(f"Chatting with {args.model}; an empty line or Ctrl-D ends it.")
    while True:
        try:
            line = input("> ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        line = line.strip()
        if not line:
            break
        messages.append({"role": "user", "content": line})
        answer = write_stream(gateway.chat(args.model, messages, **_chat_options(args)))
        messages.append({"role": "assistant", "content": answer})
    return EXIT_OK


def do_complete(args) -> int:
    from servedeck.gateway import write_stream

    gateway = gateway_for(args)
    write_stream(gateway.complete(args.model, " ".join(args.prompt), **_chat_options(args)))
    return EXIT_OK


def do_embed(args) -> int:
    vectors = gateway_for(args).embed(args.model, list(args.text))
    if args.as_json:
        show_json([{"text": t, "embedding": v} for t, v in zip(args.text, vectors, strict=True)])
        return EXIT_OK
    rows = [("INDEX", "DIMENSIONS", "FIRST VALUES", "TEXT")]
    for index, (text, vector) in enumerate(zip(args.text, vectors, strict=True)):
        first = ", ".join(f"{x:.4f}" for x in vector[:4])
        shown = text if len(text) <= 40 else text[:39] + "…"
        rows.append((str(index), str(len(vector)), f"[{first}, …]", shown))
    lines(present.table_lines(rows))
    return EXIT_OK


def do_transcribe(args) -> int:
    answer = gateway_for(args).transcribe(args.model, Path(args.file), args.language, args.format)
    text = present.dump(answer, "json") if isinstance(answer, dict) else answer
    write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK
