"""Which console a verb talks to, as whom (a saved context, or SERVEDECK_URL and
SERVEDECK_TOKEN), and the verbs that manage them: login, logout, whoami, context."""

from __future__ import annotations

import getpass
import ipaddress
import os
import sys
from urllib.parse import urlsplit

from servedeck import config, present
from servedeck.console import EXIT_OK, Console, Failed, UsageError
from servedeck.terminal import lines, out, show_json


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
