"""`servedeck`: a ServeDeck console from a terminal, over its REST API and its gateway.

Exit codes a script can use: 0 done, 1 refused or failed (the console's words on stderr),
2 usage (a bad option, not logged in, no API key), 3 the console cannot be reached.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from servedeck import (
    __version__,
    app_verbs,
    config,
    contexts,
    gateway_verbs,
    key_verbs,
    present,
    status_verbs,
)
from servedeck.console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    ClientError,
    Failed,
)
from servedeck.terminal import err

FORMATTER = argparse.RawDescriptionHelpFormatter


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
        contexts.do_login,
    )
    login.add_argument("url", metavar="URL", help="the console's address")
    login.add_argument("--name", help="the context's name (default: ORG@HOST)")
    login.add_argument(
        "--allow-http", action="store_true", help="accept plain http to a non-loopback host"
    )
    verb(
        verbs,
        "logout",
        "forget the current context's token",
        "servedeck logout",
        contexts.do_logout,
    )
    json_flag(
        verb(
            verbs,
            "whoami",
            "who the token acts as, where",
            "servedeck whoami --json",
            contexts.do_whoami,
        )
    )

    saved = group(verbs, "context", "the consoles you logged in to", "servedeck context list")
    json_flag(
        verb(saved, "list", "every context", "servedeck context list", contexts.do_context_list)
    )
    verb(
        saved,
        "use",
        "make a context current",
        "servedeck context use acme@host",
        contexts.do_context_use,
    ).add_argument("name", metavar="NAME")
    verb(
        saved,
        "remove",
        "forget a context",
        "servedeck context remove acme@host",
        contexts.do_context_remove,
    ).add_argument("name", metavar="NAME")

    apps = group(verbs, "app", "applications, from manifests", "servedeck app list")
    apply = verb(
        apps,
        "apply",
        "create or update an application from a manifest",
        "servedeck app apply -f model.yaml --dry-run",
        app_verbs.do_apply,
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
        app_verbs.do_render,
    )
    render.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    json_flag(render, "print the console's answer: objects, warnings and note")
    get = verb(
        apps,
        "get",
        "the manifest with every default filled in",
        "servedeck app get bge-embed -o json",
        app_verbs.do_get,
    )
    get.add_argument("name", metavar="NAME")
    get.add_argument("-o", "--output", choices=["yaml", "json"])
    json_flag(get, "the same as -o json")
    json_flag(
        verb(
            apps, "list", "the organisation's applications", "servedeck app list", app_verbs.do_list
        )
    )
    history = verb(
        apps, "history", "deploy history", "servedeck app history bge-embed", app_verbs.do_history
    )
    history.add_argument("name", metavar="NAME")
    json_flag(history)
    rollback = verb(
        apps,
        "rollback",
        "apply an earlier revision as a new one",
        "servedeck app rollback bge-embed --to 1",
        app_verbs.do_rollback,
    )
    rollback.add_argument("name", metavar="NAME")
    rollback.add_argument("--to", type=int, required=True, metavar="N", help="revision number")
    verb(
        apps,
        "deploy",
        "deploy the latest revision (syncType Manual)",
        "servedeck app deploy bge-embed",
        app_verbs.do_deploy,
    ).add_argument("name", metavar="NAME")
    for name, text in present.OPERATIONS.items():
        op = verb(apps, name, text, f"servedeck app {name} bge-embed", app_verbs.do_operation)
        op.add_argument("name", metavar="NAME")
    for name, text in present.ROLLOUT_DECISIONS.items():
        decide = verb(apps, name, text, f"servedeck app {name} bge-embed", app_verbs.do_decision)
        decide.add_argument("name", metavar="NAME")
    benchmark = verb(
        apps,
        "benchmark",
        present.BENCHMARK_HELP,
        "servedeck app benchmark qwen-chat",
        app_verbs.do_benchmark,
    )
    benchmark.add_argument("name", metavar="NAME")
    benchmark.add_argument(
        "--revision", type=int, metavar="N", help=present.BENCHMARK_REVISION_HELP
    )
    json_flag(benchmark)
    delete = verb(
        apps,
        "delete",
        "delete an application and all it runs",
        "servedeck app delete bge-embed",
        app_verbs.do_delete,
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
        app_verbs.do_logs,
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
        status_verbs.do_status,
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
        status_verbs.do_check,
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
        key_verbs.do_key_create,
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
    json_flag(
        verb(keys, "list", "the organisation's keys", "servedeck key list", key_verbs.do_key_list)
    )
    verb(
        keys,
        "revoke",
        "refuse a key from now",
        "servedeck key revoke support-bot",
        key_verbs.do_key_revoke,
    ).add_argument("name", metavar="NAME")
    rotate = verb(
        keys,
        "rotate",
        "a new secret; the old one works for a while",
        "servedeck key rotate support-bot --grace 30",
        key_verbs.do_key_rotate,
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
        gateway_verbs.do_chat,
    )
    chat.add_argument("model", metavar="MODEL", help="the application's name")
    chat.add_argument("prompt", metavar="PROMPT", nargs="*")
    chat.add_argument("--system", help="a system message first")
    complete = verb(
        verbs,
        "complete",
        "a completion (no chat template), streamed",
        "servedeck complete qwen-chat 'Once upon a time'",
        gateway_verbs.do_complete,
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
        gateway_verbs.do_embed,
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
        gateway_verbs.do_transcribe,
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
        if app_verbs.refused(error) if isinstance(error, Failed) else False:
            count = app_verbs.report(error.problems)
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
