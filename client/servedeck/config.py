"""Where the client keeps its logins: one context per console and organisation, like kubectl's.

The file is `$XDG_CONFIG_HOME/servedeck/config.json` (`~/.config/servedeck/` without it), in a
folder only its owner may enter (0700) and written only its owner may read (0600): it holds
personal access tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path


class ConfigError(Exception):
    """The configuration cannot be used as it is; the message says what to do."""


@dataclass
class Context:
    url: str
    token: str
    organization: str = ""
    user: str = ""


@dataclass
class Config:
    current: str = ""
    contexts: dict[str, Context] = field(default_factory=dict)


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "servedeck"


def config_path() -> Path:
    return config_dir() / "config.json"


# POSIX file modes keep the tokens private. Windows has none (os.fchmod appeared there only in
# 3.13, and chmod sets the read-only flag alone): the file is private as the user's profile
# folder is, by its access control list.
PRIVATE_MODES = os.name == "posix"

MAX_CONFIG_BYTES = 1 << 20  # a config file is a few hundred bytes a context


def load() -> Config:
    path = config_path()
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return Config()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read it ({error.strerror}).") from None
    if PRIVATE_MODES and mode & (stat.S_IRWXG | stat.S_IRWXO):
        # It holds tokens: others must not read it. Say so once, and make it private.
        print(
            f"warning: {path} was readable by others; it holds tokens, so it is now private "
            "(0600). Revoke its tokens under Team if others may have read them.",
            file=sys.stderr,
        )
        with contextlib.suppress(OSError):
            path.chmod(0o600)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; remove it, log in again.")
    try:
        data = json.loads(raw)
        contexts = {
            str(name): Context(
                **{k: str(v) for k, v in ctx.items() if k in Context.__annotations__}
            )
            for name, ctx in data.get("contexts", {}).items()
        }
        return Config(current=str(data.get("current", "")), contexts=contexts)
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(
            f"{path}: not a servedeck configuration (JSON with contexts); remove it and run "
            "servedeck login URL again."
        ) from None


def save(config: Config) -> Path:
    """Write the configuration atomically, private from the first byte."""
    folder = config_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        folder.chmod(0o700)
    body = {
        "current": config.current,
        "contexts": {name: asdict(ctx) for name, ctx in sorted(config.contexts.items())},
    }
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".config-", suffix=".json")
    try:
        # mkstemp makes it 0600 already; say so where the platform can (not Windows < 3.13).
        fchmod = getattr(os, "fchmod", None)
        if PRIVATE_MODES and fchmod is not None:
            fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(body, handle, indent=2)
            handle.write("\n")
        os.replace(temporary, config_path())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return config_path()
