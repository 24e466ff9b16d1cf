"""`status` (an application's phase, reason and health, once or followed) and `check`
(Check model): reading what the console knows, changing nothing."""

from __future__ import annotations

import json
import time

from servedeck import present
from servedeck.console import EXIT_OK, Console, Failed, segment
from servedeck.contexts import console_for
from servedeck.terminal import lines, out, show_json


def status_of(console: Console, name: str) -> dict:
    """The application and its health, as `status` shows them."""
    path = f"/applications/{segment(name)}"
    return {"application": console.get(path), "health": console.get(f"{path}/health")}


def do_status(args) -> int:
    console = console_for(args)
    shown, states = None, 0
    deadline = time.monotonic() + args.wait if args.wait else None
    while True:
        found = status_of(console, args.name)
        phase = found["application"]["status"]["phase"]
        if args.as_json:
            status = found["application"]["status"]
            block = json.dumps({"name": args.name, **status, "health": found["health"]})
        else:
            block = "\n".join(present.status_lines(found["application"], found["health"]))
        if block != shown:
            if shown is not None and not args.as_json:
                out()
            out(block)
            shown, states = block, states + 1
        if args.until:
            if phase == args.until:
                return EXIT_OK
            if phase == "Failed":
                raise Failed(f"application/{args.name} is Failed, not {args.until}.")
        if not (args.watch or args.until) or (args.count and states >= args.count):
            return EXIT_OK
        if deadline is not None and time.monotonic() > deadline:
            raise Failed(
                f"application/{args.name} is {phase} after {args.wait:g} s, not {args.until}."
            )
        time.sleep(args.interval)


def do_check(args) -> int:
    params = {"uri": args.uri, "concurrency": args.concurrency}
    for key, value in (("profile", args.profile), ("context", args.context)):
        if value is not None:
            params[key] = value
    if args.format:
        params["format"] = args.format
    answer = console_for(args).get("/models/check", params=params)
    if args.as_json:
        show_json(answer)
    else:
        lines(present.check_lines(answer))
    if not answer.get("can_serve"):
        raise Failed(answer["verdict"] if args.as_json else "cannot serve")
    return EXIT_OK
