"""`python -m console.serve [-b HOST] [-p PORT] [APP]`: the console's server. uvicorn (uvloop,
httptools, wsproto for the live pages' sockets) hands each request's body to the application
as it arrives, so a refusal (no key, a body over its limit) comes before the rest is read and
the connection closes after it; daphne read a whole body into a file first. Its access log
never carries a query string's values nor a secret in a path.

The client's address is the connection's unless it comes from SERVEDECK_TRUSTED_PROXIES
(console/asgi.py): the server's own proxy-header handling stays off, whatever is passed.
`manage.py runserver` and the live-server tests keep daphne.
"""

from __future__ import annotations

import argparse
import logging
import sys
from urllib.parse import parse_qsl, quote

from console.logs import HIDDEN, hide_secrets

# Incoming WebSocket messages of the live pages are small; uvicorn's default is 16 MiB.
WS_MAX_SIZE = 1024 * 1024
DEFAULT_APP = "console.asgi:application"


def redact_path(path: str) -> str:
    """`path` with secrets in its segments and every query parameter's value replaced by '…'
    (names stay: they help debugging and carry no secret)."""
    base, sep, query = path.partition("?")
    # A secret in a segment (an invitation link's /access/join/sdi_…/, a password link's
    # token, a key put in a path by mistake) keeps only its prefix: one rule with the logs'.
    base = hide_secrets(base)
    if not sep:
        return base
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    if not names:
        return f"{base}?{HIDDEN}"
    return base + "?" + "&".join(f"{quote(name[:64], safe='')}={HIDDEN}" for name in names[:20])


class RedactPaths(logging.Filter):
    """uvicorn's access lines (and its WebSocket lines) with their paths redacted: a path is
    an argument of the record, formatted in later."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(_is_path(a) for a in record.args):
            record.args = tuple(redact_path(a) if _is_path(a) else a for a in record.args)
        return True


def _is_path(value: object) -> bool:
    return isinstance(value, str) and value.startswith("/")


class Arguments(argparse.ArgumentParser):
    def error(self, message: str):
        if "--proxy-headers" in message:
            message = (
                "--proxy-headers is not taken: the console reads X-Forwarded-For only from the "
                "proxies listed in SERVEDECK_TRUSTED_PROXIES (docs/configuration.md)"
            )
        super().error(message)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Arguments(prog="python -m console.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("-b", "--bind", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("-p", "--port", type=int, default=8000, help="the port to listen on")
    parser.add_argument("application", nargs="?", default=DEFAULT_APP, help=DEFAULT_APP)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parse(sys.argv[1:] if argv is None else argv)
    config = uvicorn.Config(
        args.application,
        host=args.bind,
        port=args.port,
        loop="uvloop",
        http="httptools",
        ws="wsproto",
        ws_max_size=WS_MAX_SIZE,
        lifespan="on",
        proxy_headers=False,  # the client's address comes from SERVEDECK_TRUSTED_PROXIES
        server_header=False,
    )
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(RedactPaths())
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
