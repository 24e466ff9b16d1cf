"""The `app` verbs: apply and render a manifest, get, list, history, rollback, deploy, the
operations, delete and logs; and how a refused manifest's problems are printed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from servedeck import present
from servedeck.console import EXIT_OK, Console, Failed, segment
from servedeck.contexts import console_for
from servedeck.terminal import err, lines, out, output_of, show_json, table_or_json, write

MAX_MANIFEST_BYTES = 1 << 20  # read no more: the console refuses a manifest this big anyway


def read_manifest(filename: str) -> bytes:
    try:
        if filename == "-":
            return sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        with Path(filename).open("rb") as handle:
            return handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise Failed(f"-f {filename}: cannot read it ({error.strerror}).") from None


def manifest_name(text: bytes) -> str | None:
    """spec.name, to know whether the manifest updates an application; None when it cannot
    be read here (the console then says what is wrong with it)."""
    try:
        doc = yaml.safe_load(text)
        name = doc["spec"]["name"]
    except Exception:  # any unreadable document: the console answers with its own words
        return None
    return name if isinstance(name, str) and name else None


def report(problems) -> int:
    """Print a dry run's refusals and warnings as the console's command does; the refusals."""
    refusals, warnings = present.split_problems(problems)
    for problem in [*refusals, *warnings]:
        err(present.problem_line(problem))
    return len(refusals)


def refused(error: Failed) -> bool:
    """A refused manifest: its problems come from the dry run (they name their origin)."""
    return error.status == 400 and any("origin" in p and p["origin"] for p in error.problems)


def _send_manifest(console: Console, text: bytes, dry_run: bool):
    name = manifest_name(text)
    exists = False
    if name:
        try:
            console.get(f"/applications/{segment(name)}")
            exists = True
        except Failed as error:
            if error.status != 404:
                raise
    path = f"/applications/{segment(name)}" if exists else "/applications"
    return console.json(
        "PUT" if exists else "POST",
        path,
        content=text,
        params={"dryRun": "true"} if dry_run else None,
        headers={"Content-Type": "application/yaml"},
    )


def do_apply(args) -> int:
    console = console_for(args)
    text = read_manifest(args.filename)
    answer = _send_manifest(console, text, args.dry_run)
    report(answer.get("warnings", []))
    output = output_of(args)
    if args.dry_run:
        if output:
            out(present.dump(answer, output).rstrip("\n"))
            return EXIT_OK
        lines(present.dry_run_lines(answer))
        return EXIT_OK
    name = answer["application"]["spec"]["name"]
    out(present.applied_line(name, answer["action"], answer["revision"]))
    if output:
        out(present.dump(answer["application"], output).rstrip("\n"))
    return EXIT_OK


def do_render(args) -> int:
    console = console_for(args)
    answer = console.post(
        "/applications/render",
        content=read_manifest(args.filename),
        params={"output": args.output},
        headers={"Content-Type": "application/yaml"},
    )
    report(answer.get("warnings", []))
    if answer.get("note"):
        err(answer["note"])
    if args.as_json:  # the objects, warnings and note as the console answered them
        show_json(answer)
        return EXIT_OK
    write(answer["text"])
    return EXIT_OK


def do_get(args) -> int:
    answer = console_for(args).get(f"/applications/{segment(args.name)}")
    out(present.dump(answer, output_of(args, "yaml")).rstrip("\n"))
    return EXIT_OK


def do_list(args) -> int:
    found = console_for(args).get("/applications")
    return table_or_json(args, found, present.application_rows)


def do_history(args) -> int:
    found = console_for(args).get(f"/applications/{segment(args.name)}/history")
    return table_or_json(args, found, present.history_rows)


def do_rollback(args) -> int:
    answer = console_for(args).post(
        f"/applications/{segment(args.name)}/rollback", json={"revision": args.to}
    )
    report(answer.get("warnings", []))
    out(present.rolled_back_line(args.name, args.to, answer["revision"]))
    return EXIT_OK


def do_operation(args) -> int:
    answer = console_for(args).post(f"/applications/{segment(args.name)}/{args.verb}")
    status = answer["status"]
    lines(present.operation_lines(args.verb, args.name, status["phase"], status.get("reason")))
    return EXIT_OK


def do_decision(args) -> int:
    """`app promote|abort`: a Canary rollout's decision by hand."""
    answer = console_for(args).post(f"/applications/{segment(args.name)}/{args.verb}")
    lines(present.rollout_lines(args.verb, args.name, answer))
    return EXIT_OK


def do_deploy(args) -> int:
    console = console_for(args)
    answer = console.post(f"/applications/{segment(args.name)}/deploy")
    newest = console.get(f"/applications/{segment(args.name)}/history")[0]
    reason = answer["status"].get("reason")
    lines(present.deployed_lines(args.name, newest["number"], newest["outcome"], reason))
    return EXIT_OK


BENCHMARK_POLL_SECONDS = 2.0


def do_benchmark(args) -> int:
    """Start it, then read it every 2 s until it ends (the console bounds how long: its
    deadline); the results as a table, or with --json the run as the API answers it."""
    console = console_for(args)
    path = f"/applications/{segment(args.name)}/benchmarks"
    revision = getattr(args, "revision", None)
    run = console.post(path, params={"revision": revision} if revision is not None else None)
    err(f"benchmarking {args.name} revision {run['revision']} (until the end)")
    while run["state"] == "Running":
        time.sleep(BENCHMARK_POLL_SECONDS)
        run = console.get(f"{path}/{run['id']}")
    if args.as_json:
        show_json(run)
    else:
        lines(present.benchmark_lines(run))
    return EXIT_OK if run["state"] == "Succeeded" else 1


def do_delete(args) -> int:
    console = console_for(args)
    response = console.call(
        "DELETE",
        f"/applications/{segment(args.name)}",
        params={"keepOnCluster": "true"} if args.keep_on_cluster else None,
    )
    if response.status_code == 202:
        lines(present.deleting_lines(args.name, response.json().get("reason")))
        return EXIT_OK
    out(present.deleted_line(args.name))
    if response.status_code == 200 and response.json().get("leftOnCluster"):
        err(present.left_on_cluster_line(response.json()["leftOnCluster"]))
    return EXIT_OK


def do_logs(args) -> int:
    """The last lines; with -f, the lines written since, by the cursor each answer gives (each
    line once, however often its text repeats). --json: the answer; with -f, one answer a
    line (JSON lines), each with the lines it brought."""
    console = console_for(args)
    path = f"/applications/{segment(args.name)}/logs"
    params: dict[str, Any] = {"lines": args.lines, "replica": args.replica}
    answer = console.get(path, params=params)
    if args.as_json:
        out(json.dumps(answer) if args.follow else present.dump(answer, "json"))
    else:
        lines(answer["lines"])
        if not answer["lines"]:
            err(present.no_log_lines(args.name, args.replica))
    while args.follow:
        time.sleep(args.interval)
        after = {"after": answer["cursor"]} if answer.get("cursor") else {}
        answer = console.get(path, params={**params, "lines": FOLLOW_LINES, **after})
        if args.as_json and answer["lines"]:
            out(json.dumps(answer))
        elif not args.as_json:
            lines(answer["lines"])
    return EXIT_OK


FOLLOW_LINES = 1000  # at most this many new lines an answer while following (the API's bound)
