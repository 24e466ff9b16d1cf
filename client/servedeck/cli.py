"""`servedeck`: a ServeDeck console from a terminal, over its REST API and its gateway.

Exit codes a script can use: 0 done, 1 refused or failed (the console's words on stderr),
2 usage (a bad option, not logged in, no API key), 3 the console cannot be reached.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import ipaddress
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from servedeck import __version__, config, present
from servedeck.console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    ClientError,
    Console,
    Failed,
    UsageError,
    segment,
)

MAX_MANIFEST_BYTES = 1 << 20  # read no more: the console refuses a manifest this big anyway
FORMATTER = argparse.RawDescriptionHelpFormatter


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


# --- which console, as whom ----------------------------------------------------------------


def check_url(url: str, allow_http: bool) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UsageError(
            f"URL {url[:100]!r}: give the console's address, e.g. https://servedeck.example.com."
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"URL {url[:100]!r}: no user, query or fragment; only the address.")
    if parts.scheme == "http" and not (allow_http or _loopback(parts.hostname)):
        raise UsageError(
            f"URL {url[:100]!r}: plain http would send the token unencrypted; use https://, or "
            f"--allow-http ({ALLOW_HTTP_SETTING}=1 for an address from the environment) for a "
            "console on a network you trust."
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


# What --allow-http is to an address from the environment (SERVEDECK_URL, SERVEDECK_GATEWAY_URL).
ALLOW_HTTP_SETTING = "SERVEDECK_ALLOW_HTTP"


def env_allows_http() -> bool:
    return os.environ.get(ALLOW_HTTP_SETTING, "").strip().lower() in ("1", "true", "yes")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def chosen_context(args) -> tuple[str, config.Context]:
    """The context a verb acts through: SERVEDECK_URL + SERVEDECK_TOKEN (no file: for CI),
    else --console NAME (or SERVEDECK_CONSOLE), else the current one; --org picks, among the
    logins to the same console, the one of that organisation."""
    env_url, env_token = os.environ.get("SERVEDECK_URL"), os.environ.get("SERVEDECK_TOKEN")
    org = getattr(args, "org", None)
    if env_url and env_token:
        url = check_url(env_url, allow_http=env_allows_http())
        return "(SERVEDECK_URL)", config.Context(url=url, token=env_token, organization=org or "")
    cfg = config.load()
    name = getattr(args, "console", None) or os.environ.get("SERVEDECK_CONSOLE") or cfg.current
    if not name or name not in cfg.contexts:
        if name:
            known = ", ".join(sorted(cfg.contexts)) or "none"
            raise UsageError(f"--console {name}: no such context; known: {known}.")
        raise UsageError("Not logged in: run servedeck login URL first.")
    context = cfg.contexts[name]
    if org and org != context.organization:
        same = [
            (n, c)
            for n, c in sorted(cfg.contexts.items())
            if c.url == context.url and c.organization == org
        ]
        if not same:
            raise UsageError(
                f"--org {org}: no login to {context.url} for that organisation; run "
                f"servedeck login {context.url} --org {org} with a token made in {org}."
            )
        return same[0]
    return name, context


def console_for(args) -> Console:
    _, context = chosen_context(args)
    return Console(context.url, context.token, timeout=args.timeout)


# --- login, logout, whoami, contexts -------------------------------------------------------


def do_login(args) -> int:
    url = check_url(args.url, args.allow_http)
    token = os.environ.get("SERVEDECK_TOKEN")
    if not token:
        if sys.stdin.isatty():
            token = getpass.getpass(f"Personal access token for {url} (Team, Access): ")
        else:
            token = sys.stdin.readline()
    token = (token or "").strip()
    if not token:
        raise UsageError(
            "No token given: paste a personal access token (make one under Team), or set "
            "SERVEDECK_TOKEN."
        )
    console = Console(url, token, timeout=args.timeout)
    me = console.get("/me")
    if args.org and args.org != me["organization"]:
        raise Failed(
            f"--org {args.org}: this token is {me['user']}'s in {me['organization']}; make a "
            f"token in {args.org} to log in there."
        )
    name = args.name or f"{me['organization']}@{urlsplit(url).netloc}"
    cfg = config.load()
    cfg.contexts[name] = config.Context(
        url=url, token=token, organization=me["organization"], user=me["user"]
    )
    cfg.current = name
    path = config.save(cfg)
    out(
        f"Logged in to {url} as {me['user']} in {me['organization']} ({me['role']}); "
        f"context {name}, saved in {path}."
    )
    return EXIT_OK


def _forget(cfg: config.Config, name: str) -> str:
    """Remove a context; when it was the current one, none is current after (the next verb
    asks for --console or `context use`, rather than acting through another login unasked)."""
    del cfg.contexts[name]
    if cfg.current == name:
        cfg.current = ""
        return " No context is current now: servedeck context use NAME picks one."
    return ""


def do_logout(args) -> int:
    """Forget the context a verb would act through (--console, SERVEDECK_CONSOLE, --org, or
    the current one)."""
    if os.environ.get("SERVEDECK_URL") and os.environ.get("SERVEDECK_TOKEN"):
        raise UsageError(
            "Logged in through SERVEDECK_URL and SERVEDECK_TOKEN: nothing is saved to forget; "
            "unset them."
        )
    try:
        name, context = chosen_context(args)
    except UsageError as error:
        if error.message.startswith("Not logged in"):
            raise UsageError("Not logged in: nothing to forget.") from None
        raise
    cfg = config.load()
    then = _forget(cfg, name)
    config.save(cfg)
    out(
        f"Logged out of {context.url} (context {name}); the token is forgotten here and still "
        f"works until it is revoked under Team.{then}"
    )
    return EXIT_OK


def do_whoami(args) -> int:
    name, context = chosen_context(args)
    console = console_for(args)
    me = console.get("/me")
    if args.as_json:
        show_json({**me, "url": context.url, "context": name})
        return EXIT_OK
    out(
        f"{me['user']} in {me['organization']} ({me['organizationName']}), role {me['role']}, "
        f"at {context.url} (context {name})"
    )
    return EXIT_OK


def do_context_list(args) -> int:
    cfg = config.load()
    if args.as_json:
        show_json(
            [
                {"name": n, "url": c.url, "organization": c.organization, "user": c.user}
                for n, c in sorted(cfg.contexts.items())
            ]
        )
        return EXIT_OK
    rows = [("CURRENT", "NAME", "URL", "ORGANIZATION", "USER")]
    for n, c in sorted(cfg.contexts.items()):
        rows.append(("*" if n == cfg.current else "", n, c.url, c.organization, c.user))
    lines(present.table_lines(rows))
    return EXIT_OK


def _known(cfg: config.Config, name: str) -> None:
    if name not in cfg.contexts:
        known = ", ".join(sorted(cfg.contexts)) or "none"
        raise UsageError(f"NAME {name}: no such context; known: {known}.")


def do_context_use(args) -> int:
    cfg = config.load()
    _known(cfg, args.name)
    cfg.current = args.name
    config.save(cfg)
    out(f"Using context {args.name} ({cfg.contexts[args.name].url}).")
    return EXIT_OK


def do_context_remove(args) -> int:
    cfg = config.load()
    _known(cfg, args.name)
    then = _forget(cfg, args.name)
    config.save(cfg)
    out(f"Context {args.name} removed.{then}")
    return EXIT_OK


# --- applications --------------------------------------------------------------------------


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


def output_of(args, default: str | None = None) -> str | None:
    return "json" if getattr(args, "as_json", False) else (args.output or default)


def table_or_json(args, found, rows) -> int:
    """A read verb's answer: the console's JSON with --json, else its rows as a table."""
    if args.as_json:
        show_json(found)
    else:
        lines(present.table_lines(rows(found)))
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


def do_deploy(args) -> int:
    console = console_for(args)
    answer = console.post(f"/applications/{segment(args.name)}/deploy")
    newest = console.get(f"/applications/{segment(args.name)}/history")[0]
    reason = answer["status"].get("reason")
    lines(present.deployed_lines(args.name, newest["number"], newest["outcome"], reason))
    return EXIT_OK


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


# --- status --------------------------------------------------------------------------------


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


# --- Check model ---------------------------------------------------------------------------


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


# --- API keys ------------------------------------------------------------------------------


def _key_failure(error: Failed) -> Failed:
    """A key verb's refusal names the option it came from, as `manage.py apikey` does."""
    if error.status == 400 and error.problems and error.problems[0].get("path"):
        first = error.problems[0]
        error.message = f"{present.key_flag(first['path'])}: {first['message']}"
        error.problems = []
    return error


def _secret(answer: dict, as_json: bool, said: str) -> None:
    if as_json:
        show_json(answer)
        return
    out(said)
    out(answer["key"])
    err(present.SECRET_ONCE)


def do_key_create(args) -> int:
    body = {
        "name": args.name,
        "applications": args.apps,
        "requestsPerMinute": args.rpm,
        "tokensPerMinute": args.tpm,
        "concurrentRequests": args.concurrency,
        "expiresInDays": args.expires_in,
    }
    try:
        answer = console_for(args).post("/keys", json=body)
    except Failed as error:
        raise _key_failure(error) from None
    _secret(answer, args.as_json, present.key_created_line(answer["name"]))
    return EXIT_OK


def do_key_list(args) -> int:
    found = console_for(args).get("/keys")
    return table_or_json(args, found, present.key_rows)


def do_key_revoke(args) -> int:
    console = console_for(args)
    before = console.get(f"/keys/{segment(args.name)}")
    console.post(f"/keys/{segment(args.name)}/revoke")
    out(present.key_revoked_line(args.name, already=before["state"] == "revoked"))
    return EXIT_OK


def do_key_rotate(args) -> int:
    try:
        answer = console_for(args).post(
            f"/keys/{segment(args.name)}/rotate", json={"graceMinutes": args.grace}
        )
    except Failed as error:
        raise _key_failure(error) from None
    said = present.key_rotated_line(args.name, answer.get("previousExpiresAt"))
    _secret(answer, args.as_json, said)
    return EXIT_OK


# --- the gateway ---------------------------------------------------------------------------


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


# --- the parser ----------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    """Options every verb takes, wherever they stand on the line."""
    common = argparse.ArgumentParser(add_help=False)
    s = argparse.SUPPRESS
    common.add_argument(
        "--console", metavar="NAME", default=s, help="the context to use (servedeck context list)"
    )
    common.add_argument(
        "--org", metavar="SLUG", default=s, help="the organisation, among your logins to it"
    )
    common.add_argument(
        "--timeout", type=float, metavar="SECONDS", default=s, help="seconds to wait for answers"
    )
    return common


COMMON = _common()


def verb(subparsers, name: str, summary: str, example: str, func, **kwargs):
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example:\n  {example}",
        formatter_class=FORMATTER,
        parents=[COMMON],
        **kwargs,
    )
    parser.set_defaults(func=func)
    return parser


def group(subparsers, name: str, summary: str, example: str):
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example:\n  {example}",
        formatter_class=FORMATTER,
    )
    return parser.add_subparsers(dest="verb", required=True, metavar="VERB")


def json_flag(parser, what: str = "print the console's JSON answer") -> None:
    parser.add_argument("--json", action="store_true", dest="as_json", help=what)


def gateway_flags(parser) -> None:
    parser.add_argument("--key", help="an API key (default: SERVEDECK_API_KEY)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servedeck",
        description="A ServeDeck console from a terminal: deploy models, manage API keys, call "
        "them. Exit codes: 0 done, 1 refused or failed, 2 usage, 3 cannot reach the console.",
        epilog="example:\n  servedeck login https://servedeck.example.com\n"
        "  servedeck app apply -f model.yaml --dry-run\n"
        "  servedeck chat qwen-chat 'Hello'",
        formatter_class=FORMATTER,
        parents=[COMMON],
    )
    parser.add_argument("--version", action="version", version=f"servedeck {__version__}")
    verbs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    login = verb(
        verbs,
        "login",
        "log in to a console with a personal access token (prompted, or SERVEDECK_TOKEN)",
        "SERVEDECK_TOKEN=sdp_… servedeck login https://servedeck.example.com",
        do_login,
    )
    login.add_argument("url", metavar="URL", help="the console's address")
    login.add_argument("--name", help="the context's name (default: ORG@HOST)")
    login.add_argument(
        "--allow-http", action="store_true", help="accept plain http to a non-loopback host"
    )
    verb(verbs, "logout", "forget the current context's token", "servedeck logout", do_logout)
    json_flag(
        verb(verbs, "whoami", "who the token acts as, where", "servedeck whoami --json", do_whoami)
    )

    contexts = group(verbs, "context", "the consoles you logged in to", "servedeck context list")
    json_flag(verb(contexts, "list", "every context", "servedeck context list", do_context_list))
    verb(
        contexts, "use", "make a context current", "servedeck context use acme@host", do_context_use
    ).add_argument("name", metavar="NAME")
    verb(
        contexts,
        "remove",
        "forget a context",
        "servedeck context remove acme@host",
        do_context_remove,
    ).add_argument("name", metavar="NAME")

    apps = group(verbs, "app", "applications, from manifests", "servedeck app list")
    apply = verb(
        apps,
        "apply",
        "create or update an application from a manifest",
        "servedeck app apply -f model.yaml --dry-run",
        do_apply,
    )
    apply.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    apply.add_argument("--dry-run", action="store_true", help="check it; save nothing")
    apply.add_argument("-o", "--output", choices=["yaml", "json"])
    json_flag(apply, "the same as -o json")
    render = verb(
        apps,
        "render",
        "the Kubernetes objects a manifest renders into",
        "servedeck app render -f model.yaml -o json",
        do_render,
    )
    render.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    json_flag(render, "print the console's answer: objects, warnings and note")
    get = verb(
        apps,
        "get",
        "the manifest with every default filled in",
        "servedeck app get bge-embed -o json",
        do_get,
    )
    get.add_argument("name", metavar="NAME")
    get.add_argument("-o", "--output", choices=["yaml", "json"])
    json_flag(get, "the same as -o json")
    json_flag(verb(apps, "list", "the organisation's applications", "servedeck app list", do_list))
    history = verb(apps, "history", "deploy history", "servedeck app history bge-embed", do_history)
    history.add_argument("name", metavar="NAME")
    json_flag(history)
    rollback = verb(
        apps,
        "rollback",
        "apply an earlier revision as a new one",
        "servedeck app rollback bge-embed --to 1",
        do_rollback,
    )
    rollback.add_argument("name", metavar="NAME")
    rollback.add_argument("--to", type=int, required=True, metavar="N", help="revision number")
    verb(
        apps,
        "deploy",
        "deploy the latest revision (syncType Manual)",
        "servedeck app deploy bge-embed",
        do_deploy,
    ).add_argument("name", metavar="NAME")
    for name, text in present.OPERATIONS.items():
        op = verb(apps, name, text, f"servedeck app {name} bge-embed", do_operation)
        op.add_argument("name", metavar="NAME")
    delete = verb(
        apps,
        "delete",
        "delete an application and all it runs",
        "servedeck app delete bge-embed",
        do_delete,
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument(
        "--keep-on-cluster",
        action="store_true",
        help="when its cluster does not answer, delete it from the console anyway",
    )
    logs = verb(
        apps,
        "logs",
        "the last lines of a replica's model server log",
        "servedeck app logs bge-embed -f",
        do_logs,
    )
    logs.add_argument("name", metavar="NAME")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--lines", type=int, default=100, metavar="N", help="how many (1 to 1000)")
    logs.add_argument("--replica", type=int, default=0, metavar="R", help="which replica")
    logs.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    json_flag(logs, "print the console's answer (with -f: one answer a line, JSON lines)")

    status = verb(
        verbs,
        "status",
        "phase, reason, next step, success rate and latency of an application",
        "servedeck status bge-embed --watch",
        do_status,
    )
    status.add_argument("name", metavar="NAME")
    status.add_argument("--watch", action="store_true", help="follow it; Ctrl-C ends")
    status.add_argument(
        "--until", metavar="PHASE", help="follow it until PHASE (exit 1 if it fails first)"
    )
    status.add_argument(
        "--wait", type=float, metavar="SECONDS", help="with --until: give up after this long"
    )
    status.add_argument(
        "--count", type=int, metavar="N", help="with --watch: end after showing N states"
    )
    status.add_argument("--interval", type=float, default=2.0, metavar="SECONDS")
    json_flag(status, "print JSON (one object per change with --watch)")

    check = verb(
        verbs,
        "check",
        "Check model: can the platform serve it, which runtime, how much memory, which GPUs",
        "servedeck check hf://BAAI/bge-m3 --profile local --context 8192",
        do_check,
    )
    check.add_argument("uri", metavar="URI", help="hf://org/repo[:revision], s3://…, file://…")
    check.add_argument("--profile", help="the profile whose catalog and token to use")
    check.add_argument("--context", type=int, metavar="N", help="context length to size for")
    check.add_argument("--concurrency", type=int, default=1, help="requests at once")
    check.add_argument("--format", help="the model format, for anything but hf://")
    json_flag(check, "print the whole answer as JSON")

    keys = group(verbs, "key", "API keys for the gateway (admins)", "servedeck key list")
    create = verb(
        keys,
        "create",
        "a new key; its secret is printed once",
        "servedeck key create support-bot --app bge-embed --rpm 60",
        do_key_create,
    )
    create.add_argument("name", metavar="NAME", help="who calls with it, e.g. support-bot")
    create.add_argument(
        "--app",
        action="append",
        dest="apps",
        metavar="APP",
        help="an application it may call (repeat; default: every application)",
    )
    create.add_argument("--rpm", type=int, help="requests per minute (default: no limit)")
    create.add_argument("--tpm", type=int, help="tokens per minute (default: no limit)")
    create.add_argument("--concurrency", type=int, help="concurrent requests (default: no limit)")
    create.add_argument("--expires-in", type=int, metavar="DAYS", help="days until it expires")
    json_flag(create, "print a JSON object")
    json_flag(verb(keys, "list", "the organisation's keys", "servedeck key list", do_key_list))
    verb(
        keys, "revoke", "refuse a key from now", "servedeck key revoke support-bot", do_key_revoke
    ).add_argument("name", metavar="NAME")
    rotate = verb(
        keys,
        "rotate",
        "a new secret; the old one works for a while",
        "servedeck key rotate support-bot --grace 30",
        do_key_rotate,
    )
    rotate.add_argument("name", metavar="NAME")
    rotate.add_argument(
        "--grace", type=int, default=60, metavar="MINUTES", help="minutes the old one works"
    )
    json_flag(rotate, "print a JSON object")

    chat = verb(
        verbs,
        "chat",
        "chat with a model through the gateway; streams the answer; no PROMPT: a session",
        "servedeck chat qwen-chat 'What is the capital of France?'",
        do_chat,
    )
    chat.add_argument("model", metavar="MODEL", help="the application's name")
    chat.add_argument("prompt", metavar="PROMPT", nargs="*")
    chat.add_argument("--system", help="a system message first")
    complete = verb(
        verbs,
        "complete",
        "a completion (no chat template), streamed",
        "servedeck complete qwen-chat 'Once upon a time'",
        do_complete,
    )
    complete.add_argument("model", metavar="MODEL")
    complete.add_argument("prompt", metavar="PROMPT", nargs="+")
    for parser_ in (chat, complete):
        parser_.add_argument("--max-tokens", type=int, metavar="N")
        parser_.add_argument("--temperature", type=float)
        gateway_flags(parser_)
    embed = verb(
        verbs,
        "embed",
        "embeddings of texts",
        "servedeck embed bge-embed 'eating bread' 'a plane taking off' --json",
        do_embed,
    )
    embed.add_argument("model", metavar="MODEL")
    embed.add_argument("text", metavar="TEXT", nargs="+")
    json_flag(embed, "print every vector")
    gateway_flags(embed)
    transcribe = verb(
        verbs,
        "transcribe",
        "speech to text of an audio file",
        "servedeck transcribe whisper talk.wav --language en --format srt",
        do_transcribe,
    )
    transcribe.add_argument("model", metavar="MODEL")
    transcribe.add_argument("file", metavar="FILE")
    transcribe.add_argument("--language", metavar="xx", help="ISO-639-1, e.g. en")
    transcribe.add_argument(
        "--format", choices=["text", "json", "srt", "vtt", "verbose_json"], default="text"
    )
    gateway_flags(transcribe)

    completion = verb(
        verbs,
        "completion",
        "a shell completion script for bash or zsh",
        'eval "$(servedeck completion bash)"   # in ~/.bashrc',
        do_completion,
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    return parser


def do_completion(args) -> int:
    from servedeck.completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.timeout_given = hasattr(args, "timeout")
    if not args.timeout_given:
        args.timeout = 30.0
    for name in ("console", "org"):  # the common options, wherever they stood (or not at all)
        if not hasattr(args, name):
            setattr(args, name, None)
    try:
        return args.func(args)
    except ClientError as error:
        if refused(error) if isinstance(error, Failed) else False:
            count = report(error.problems)
            err(present.error_line(present.refused_summary(count)))
            return EXIT_FAILED
        err(present.error_line(error.message))
        if error.status == 422:  # which request field, and why
            for problem in error.problems:
                err(f"  {present.problem_line(problem)}")
        return error.exit_code
    except config.ConfigError as error:
        err(present.error_line(str(error)))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (quiet the interpreter's flush)
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["EXIT_UNREACHABLE", "build_parser", "main"]
