"""`python -m console.serve …`: daphne, with the same arguments, whose access log never carries
a query string's values (a token or password put in a URL would otherwise be written to it).

Daphne writes its access log from the raw request line before the application sees it, so the
application cannot hide a value from it; its CommandLineInterface takes a `server_class`, and
this one hands daphne's own access logger paths with the values replaced.
"""

import re
import sys
from collections.abc import Callable
from urllib.parse import parse_qsl, quote

from daphne.cli import CommandLineInterface
from daphne.server import Server

from accesspolicies.secrets import KINDS

HIDDEN = "…"
# A path segment that is a secret: an invitation link's (/access/join/sdi_…/), or a token or
# key put in a path by mistake. Only its prefix is logged.
_PREFIXES = "|".join(kind.prefix for kind in KINDS)
SECRET_SEGMENT = re.compile(rf"(?<=/)({_PREFIXES})[^/?]*")


def redact_path(path: str) -> str:
    """`path` with secrets in its segments and every query parameter's value replaced by '…'
    (names stay: they help debugging and carry no secret)."""
    base, sep, query = path.partition("?")
    base = SECRET_SEGMENT.sub(lambda found: found.group(1) + HIDDEN, base)
    if not sep:
        return base
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    if not names:
        return f"{base}?{HIDDEN}"
    return base + "?" + "&".join(f"{quote(name[:64], safe='')}={HIDDEN}" for name in names[:20])


def redacting(action_logger: Callable) -> Callable:
    def log(protocol, action, details):
        if "path" in details and isinstance(details["path"], str):
            details = {**details, "path": redact_path(details["path"])}
        return action_logger(protocol, action, details)

    return log


class RedactingServer(Server):
    def __init__(self, *args, action_logger=None, **kwargs):
        if action_logger is not None:
            action_logger = redacting(action_logger)
        super().__init__(*args, action_logger=action_logger, **kwargs)


class RedactingCommandLineInterface(CommandLineInterface):
    server_class = RedactingServer


def main(argv: list[str] | None = None) -> None:
    RedactingCommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
