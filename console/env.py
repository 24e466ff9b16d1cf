"""Typed readers for settings from the environment; a bad value stops start-up, naming it."""

import ipaddress
import os
import re
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean; use one of 1, true, yes, on, 0, false, no, off."
    )


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list[str]:
    """Addresses or networks (CIDR), comma-separated; none by default."""
    items = env_list(name, [])
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} holds {item[:60]!r}, which is not an address or a network; list "
                "addresses or CIDRs, comma-separated (e.g. 10.0.0.0/8,192.0.2.7)."
            ) from None
    return items


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={raw[:40]!r} is not one of {', '.join(choices)}.")
    return value


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def env_namespaces(name: str, default: list[str]) -> list[str]:
    """Kubernetes namespace names, comma-separated, or "*" alone for any."""
    items = env_list(name, default)
    if items == ["*"]:
        return items
    bad = [item for item in items if not DNS_LABEL.fullmatch(item)]
    if bad or not items:
        shown = ", ".join(repr(item[:80]) for item in bad) or "nothing"
        raise ImproperlyConfigured(
            f"{name} holds {shown}; accepts namespace names (lowercase letters, digits and '-', "
            "at most 63), comma-separated, or * alone for any namespace."
        )
    return items


def env_url(name: str, schemes: set[str], default: str = "") -> str:
    raw = os.environ.get(name, default)
    if not raw:
        return raw
    parts = urlsplit(raw)
    if parts.scheme not in schemes:
        accepted = ", ".join(f"{s}://" for s in sorted(schemes))
        raise ImproperlyConfigured(
            f"{name} has scheme {parts.scheme or '(none)'!r}; accepted: {accepted}."
        )
    return raw


def parse_host_port(raw: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port` or `[v6]:port` as (host, port); ValueError says what is wrong."""
    text = raw.strip()
    host, port = text, str(default_port)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError("write an IPv6 address as [address]:port")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected host:port with a port from 1 to 65535")
    return host, int(port)


def env_host_port(name: str, default_port: int) -> tuple[str, int] | None:
    """An address as (host, port), or None when the variable is unset or empty."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return None
    try:
        return parse_host_port(raw, default_port)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}={raw[:80]!r}: {error}.") from None


FLAGS_SETTING = "SERVEDECK_EXTRA_ENGINE_FLAGS"


def configured_engine_flags() -> dict:
    """The SERVEDECK_EXTRA_ENGINE_FLAGS setting (else the environment variable), read when
    called; raises ValueError naming the entry that cannot be read. Here, beside the other
    settings helpers, so that jobs and models_catalog both read it without importing each
    other."""
    from jobs.manifest.engine_flags import parse_extra_flags

    value = None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, FLAGS_SETTING, None)
    except ImportError:
        value = None
    if not value:
        value = os.environ.get(FLAGS_SETTING, "")
    try:
        return parse_extra_flags(value)
    except ValueError as exc:
        raise ValueError(f"{FLAGS_SETTING}: {exc}") from None
