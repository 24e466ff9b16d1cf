"""spec.rollout: how a new revision replaces the running one. Replace (the default, and what
an absent block means) or Canary: the new revision takes a rising share of the requests, step by
step, judged at each step's end against the stable one (jobs/rollouts/judge.py).

Its defaults, its rules and `plan_of`, the plain reading of a filled manifest's block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.kube_names import CANARY_SUFFIX, PREDICTOR_SUFFIX

from .checks import Bad, duration_seconds
from .problems import Out, show


def ok(value: Any) -> bool:  # as defaults.ok (which imports this module)
    return value is not None and not isinstance(value, Bad)


def plain(value: Any) -> Any:  # the block's values are plain already (text, numbers, a list)
    if isinstance(value, Bad):
        return value.raw
    return list(value) if isinstance(value, tuple) else value


PATH = "spec.rollout"
DEFAULT_STEPS = (10, 50)
DEFAULT_STEP_DURATION = "10m"
DEFAULT_MAX_ERROR_RATE_INCREASE = 0.02
DEFAULT_MAX_LATENCY_INCREASE = 0.25
# Requests each revision must have answered in a step's window before it is judged: below it
# the step waits (a handful of requests says nothing of a 2% difference).
DEFAULT_MIN_REQUESTS = 100
# On Kubernetes the canary is a second InferenceService, <name>-canary (jobs.render.canary),
# served under the application's model name: ServeDeck sets it for these engines' runtimes.
KUBERNETES_CANARY_ENGINES = ("vllm", "parakeet")
# Its predictor Service, <name>-canary-predictor, is a Service name: 63 characters at most.
KUBERNETES_CANARY_NAME_MAX = 63 - len(PREDICTOR_SUFFIX) - len(CANARY_SUFFIX)
CANARY_ONLY = ("steps", "stepDuration", "maxErrorRateIncrease", "maxLatencyIncrease", "minRequests")


def fill(rollout: Any) -> Any:
    """The filled block: None when absent (Replace, as before the field existed, so a manifest
    without it is unchanged); Canary's limits filled in."""
    if isinstance(rollout, Bad):
        return rollout.raw
    if rollout is None or all(value is None for value in rollout.values()):
        return None
    strategy = rollout.get("strategy") or "Replace"
    out: dict[str, Any] = {"strategy": plain(strategy)}
    if strategy == "Canary":
        defaults = {
            "steps": list(DEFAULT_STEPS),
            "stepDuration": DEFAULT_STEP_DURATION,
            "maxErrorRateIncrease": DEFAULT_MAX_ERROR_RATE_INCREASE,
            "maxLatencyIncrease": DEFAULT_MAX_LATENCY_INCREASE,
            "minRequests": DEFAULT_MIN_REQUESTS,
        }
        for name, default in defaults.items():
            value = rollout.get(name)
            out[name] = plain(value) if value is not None else default
    else:
        for name in CANARY_ONLY:
            if rollout.get(name) is not None:
                out[name] = plain(rollout[name])
    return out


def check(spec: dict[str, Any], facts: Any, out: Out) -> None:
    rollout = spec.get("rollout")
    if not isinstance(rollout, dict):
        return
    strategy = rollout.get("strategy") or "Replace"
    if not ok(strategy):
        return
    if strategy != "Canary":
        for name in CANARY_ONLY:
            if rollout.get(name) is not None:
                out.warn(
                    f"{PATH}.{name}",
                    f"is ignored: strategy is {show(strategy)}, and only a Canary rollout has "
                    f"steps and limits. Set strategy to Canary, or remove {name}.",
                )
        return
    profile = facts.profile
    if profile is not None and profile.backend == "kubernetes":
        _check_kubernetes(spec, facts, out)
    source = spec.get("source")
    if isinstance(source, dict) and source.get("type") == "YAML":
        out.refuse(
            f"{PATH}.strategy",
            "Canary splits the requests of a model ServeDeck serves; source.type YAML (your "
            "own InferenceService) is replaced as a whole; accepts Replace with it. Set "
            "strategy to Replace, or describe the model with source.type Model.",
        )
    model = source.get("model") if isinstance(source, dict) else None
    scaling = model.get("scaling") if isinstance(model, dict) else None
    low = scaling.get("minReplicas") if isinstance(scaling, dict) else None
    if low == 0:
        out.refuse(
            f"{PATH}.strategy",
            "Canary needs the stable revision serving while the new one is judged; "
            "spec.source.model.scaling.minReplicas is 0 (the model sleeps when idle); accepts "
            "minReplicas 1 or more with Canary. Set minReplicas to 1, or strategy to Replace.",
        )


def _check_kubernetes(spec: dict[str, Any], facts: Any, out: Out) -> None:
    """What a canary beside the stable InferenceService needs on a Kubernetes profile."""
    profile = facts.profile.name
    if facts.isolation == "VirtualMachine":
        out.refuse(
            f"{PATH}.strategy",
            f"Canary on Kubernetes (profile {profile}) runs the new revision as a second "
            "InferenceService beside the stable one; runtime.isolation VirtualMachine is "
            "replaced as a whole; accepts Replace with it. Set strategy to Replace, or "
            "isolation to Container.",
        )
    elif facts.engine is not None and facts.engine not in KUBERNETES_CANARY_ENGINES:
        out.refuse(
            f"{PATH}.strategy",
            f"Canary on Kubernetes (profile {profile}) serves the canary under the "
            "application's model name, which ServeDeck sets for the engines "
            f"{', '.join(KUBERNETES_CANARY_ENGINES)}; runtime.engine is {facts.engine}; accepts "
            "Replace with it. Set strategy to Replace.",
        )
    name = spec.get("name")
    if isinstance(name, str) and len(name) > KUBERNETES_CANARY_NAME_MAX:
        out.refuse(
            f"{PATH}.strategy",
            f"Canary on Kubernetes (profile {profile}) runs the canary as '<name>-canary', "
            f"whose predictor Service '<name>-canary-predictor' must fit 63 characters; "
            f"spec.name {name!r} has {len(name)}; accepts names of at most "
            f"{KUBERNETES_CANARY_NAME_MAX} characters with Canary. Choose a shorter name, or "
            "set strategy to Replace.",
        )


@dataclass(frozen=True)
class RolloutPlan:
    """A filled manifest's rollout, as the reconciler and the judge read it."""

    strategy: str = "Replace"
    steps: tuple[int, ...] = DEFAULT_STEPS
    step_seconds: int = 600
    max_error_rate_increase: float = DEFAULT_MAX_ERROR_RATE_INCREASE
    max_latency_increase: float = DEFAULT_MAX_LATENCY_INCREASE
    min_requests: int = DEFAULT_MIN_REQUESTS

    @property
    def canary(self) -> bool:
        return self.strategy == "Canary"

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "stepSeconds": self.step_seconds,
            "maxErrorRateIncrease": self.max_error_rate_increase,
            "maxLatencyIncrease": self.max_latency_increase,
            "minRequests": self.min_requests,
        }

    @classmethod
    def of_dict(cls, data: dict[str, Any]) -> RolloutPlan:
        return cls(
            strategy="Canary",
            steps=tuple(data["steps"]),
            step_seconds=int(data["stepSeconds"]),
            max_error_rate_increase=float(data["maxErrorRateIncrease"]),
            max_latency_increase=float(data["maxLatencyIncrease"]),
            min_requests=int(data["minRequests"]),
        )


def plan_of(manifest: Any) -> RolloutPlan:
    """The rollout a filled manifest asks for; Replace when it says none."""
    spec = manifest.get("spec") if isinstance(manifest, dict) else None
    rollout = spec.get("rollout") if isinstance(spec, dict) else None
    if not isinstance(rollout, dict) or rollout.get("strategy") != "Canary":
        return RolloutPlan()
    seconds = duration_seconds(str(rollout.get("stepDuration") or DEFAULT_STEP_DURATION))
    return RolloutPlan(
        strategy="Canary",
        steps=tuple(rollout.get("steps") or DEFAULT_STEPS),
        step_seconds=seconds or 600,
        max_error_rate_increase=float(
            rollout.get("maxErrorRateIncrease", DEFAULT_MAX_ERROR_RATE_INCREASE)
        ),
        max_latency_increase=float(rollout.get("maxLatencyIncrease", DEFAULT_MAX_LATENCY_INCREASE)),
        min_requests=int(rollout.get("minRequests", DEFAULT_MIN_REQUESTS)),
    )
