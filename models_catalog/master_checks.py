"""What a model master may hold, checked when it is saved (form, recipe import): engine
arguments by the manifest's own engine-flag rule, and a short environment of plain values.

The dry run checks a stored master's arguments again where they are used, so a master saved
before these checks cannot slip a refused flag into a deployment.
"""

from __future__ import annotations

import re
from typing import Any

from jobs.backends.local.command import configured_engine_flags
from jobs.manifest.bounded import Limits
from jobs.manifest.engine_flags import check_engine_args
from jobs.manifest.problems import show

# An environment is a flat mapping of a few variables: no nesting, no aliases.
ENV_LIMITS = Limits(
    max_bytes=16 * 1024,
    max_depth=2,
    max_nodes=400,
    max_aliases=0,
    max_expanded_bytes=16 * 1024,
    what="an environment",
    hint="give at most 100 variables as NAME: value, one a line",
)
MAX_ENV_VARIABLES = 100
MAX_ENV_VALUE = 4096
MAX_ARGS_TEXT = 4000
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def args_problems(args: list[Any], field: str = "extra_args") -> list[str]:
    """Why the master's engine arguments would be refused at the dry run (sentences)."""
    problems = check_engine_args(args, extra_flags=configured_engine_flags())
    return [f"{field}[{index}]: {sentence}" for index, sentence in problems]


def env_problems(env: Any, field: str = "env") -> list[str]:
    """Why the master's environment cannot be stored: a flat mapping of NAME to short text."""
    if not isinstance(env, dict):
        return [f"{field}: must be a mapping of NAME: value."]
    if len(env) > MAX_ENV_VARIABLES:
        return [f"{field}: holds {len(env)} variables; accepts at most {MAX_ENV_VARIABLES}."]
    problems = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            problems.append(
                f"{field}: {show(name)} is not a variable name; accepts letters, digits and _, "
                "not starting with a digit."
            )
        elif isinstance(value, (dict, list)) or value is None:
            problems.append(
                f"{field}.{name}: is not a plain value; accepts text or a number. Quote it."
            )
        elif len(str(value)) > MAX_ENV_VALUE:
            problems.append(
                f"{field}.{name}: is {len(str(value))} characters; accepts at most {MAX_ENV_VALUE}."
            )
    return problems
