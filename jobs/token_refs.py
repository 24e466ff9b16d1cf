"""Hugging Face token references: `secret/<name>` (a Secret on the cluster) or `env/<VAR>`, a
variable of the console's host that the operator allowed for the organisation
(Organization.token_variables). Members never choose which host variable is read.

Pure: the same rule where a reference is saved (the profile form) and where a token is read
(Check model, the local backend's model servers).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

SECRET_REF = re.compile(r"secret/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
ENV_REF = re.compile(r"env/(?P<var>[A-Z_][A-Z0-9_]{0,99})")
VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")
# The console's own settings: never a token, whatever an operator types.
CONSOLE_VARIABLES = frozenset(
    {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "TEST_DATABASE_NAME", "PATH", "HOME"}
)
CONSOLE_PREFIXES = ("SERVEDECK_", "DJANGO_")
SHOWN_CHARACTERS = 120


def _shown(value: str) -> str:
    return repr(value if len(value) <= SHOWN_CHARACTERS else value[:SHOWN_CHARACTERS] + "…")


def variable_problem(name: str) -> str | None:
    """Why `name` cannot be allowed as a token variable; None when it can."""
    if not isinstance(name, str) or not VARIABLE.fullmatch(name):
        return (
            f"{_shown(str(name))} is not an environment variable name: use capital letters, "
            "digits and '_', such as HF_TOKEN_ACME."
        )
    if name in CONSOLE_VARIABLES or name.startswith(CONSOLE_PREFIXES):
        return f"{name} is one of the console's own settings, never a Hugging Face token."
    return None


def allowed_variables(allowed: object) -> frozenset[str]:
    """The usable names of Organization.token_variables (a JSON list an operator set)."""
    if not isinstance(allowed, list | tuple):
        return frozenset()
    return frozenset(v for v in allowed if isinstance(v, str) and variable_problem(v) is None)


def reference_problem(ref: str, allowed: Iterable[str], organization: str) -> str | None:
    """Why a profile may not hold `ref`; None when it may (empty means no token)."""
    if not ref:
        return None
    env = ENV_REF.fullmatch(ref)
    if env is None and SECRET_REF.fullmatch(ref) is None:
        return (
            f"{_shown(ref)} is not a token reference; write secret/<secret-name> (a Secret in "
            "the profile's namespace, key HF_TOKEN) or env/<VARIABLE> (a variable the operator "
            "allowed for this organisation). Never paste the token."
        )
    if env is not None:
        names = sorted(allowed_variables(list(allowed)))
        if env["var"] not in names:
            listed = ", ".join(names) if names else "none"
            return (
                f"{ref} names a variable of the console's host that the operator has not allowed "
                f"for organisation {organization} (allowed: {listed}). Use secret/<name>, or ask "
                f"the operator to run `manage.py organization allow-token-variable "
                f"{organization} {env['var']}`."
            )
    return None


def env_token(ref: str, allowed: Iterable[str], environ: Mapping[str, str]) -> str | None:
    """The token an `env/VAR` reference names, read only when VAR is allowed; None otherwise
    (no reference, a secret/ reference, or a variable the operator did not allow)."""
    env = ENV_REF.fullmatch(ref or "")
    if env is None or env["var"] not in allowed_variables(list(allowed)):
        return None
    return environ.get(env["var"]) or None


def profile_token(profile) -> str | None:
    """The Hugging Face token a profile names as `env/VAR`, read from this process's
    environment only when the operator allowed VAR for its organisation (a `secret/` reference
    is the cluster's, never read here). The one resolver: Check model and the local backend's
    model servers both ask it, at each use, so taking a variable back takes effect at once."""
    allowed = profile.organization.token_variables
    return env_token(profile.hf_token_ref or "", allowed, os.environ)
