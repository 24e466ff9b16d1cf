"""The wizard's steps, and which step owns each problem of a dry run (pure).

Rules live in the manifest core and Check model; a step only shows, beside its fields, the
dry run's problems at the paths it owns. A problem is never lost: what no step names belongs
to the first step, so the user cannot reach Review with a refusal pending anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobs.manifest import Problem
from jobs.wizard.paths import MODEL, under

URI = f"{MODEL}.uri"
TARGET = "spec.profileName"  # where the target's preflight answers


@dataclass(frozen=True)
class Step:
    slug: str
    title: str
    owns: tuple[str, ...]  # manifest paths (and everything under them)


STEPS: tuple[Step, ...] = (
    Step(
        "model",
        "Model",
        (
            "document",
            "apiVersion",
            "kind",
            "spec.name",
            "spec.profileName",
            "spec.namespace",
            "spec.syncType",
            "spec.source.type",
            "spec.source.inferenceService",
            URI,
            f"{MODEL}.format",
            f"{MODEL}.runtime",
        ),
    ),
    Step("check", "Check model", ()),  # Check model's own answer; see owner()
    Step(
        "compute",
        "Compute",
        (
            f"{MODEL}.resources",
            f"{MODEL}.engine",
            f"{MODEL}.serving.maxContextTokens",
            f"{MODEL}.serving.kvCacheSize",
            f"{MODEL}.serving.maxConcurrentRequests",
            f"{MODEL}.scaling",
            f"{MODEL}.queue",
            f"{MODEL}.cache",
        ),
    ),
    Step("access", "Access", ("spec.access",)),
    Step("api", "API", (f"{MODEL}.serving.apiFormat", f"{MODEL}.serving.multimodal")),
    Step("review", "Review", ()),
)
BY_SLUG = {step.slug: step for step in STEPS}
SLUGS = tuple(step.slug for step in STEPS)
FIRST, LAST = SLUGS[0], SLUGS[-1]
# A whole group refused at once (rare) goes where most of its fields are edited.
GROUP_OWNERS = {f"{MODEL}.serving": "compute"}


def index(slug: str) -> int:
    return SLUGS.index(slug)


def previous(slug: str) -> str | None:
    at = index(slug)
    return SLUGS[at - 1] if at > 0 else None


def following(slug: str) -> str | None:
    at = index(slug)
    return SLUGS[at + 1] if at + 1 < len(SLUGS) else None


def owner(problem: Problem) -> str:
    """The slug of the step whose fields can fix (or whose answer is) this problem: Check
    model's own verdict and warnings (at the uri) are the Check step's; the rest goes by path."""
    if problem.origin == "check-model" and problem.path == URI:
        return "check"
    path = problem.field
    best, best_length = None, -1
    for step in STEPS:
        for owned in step.owns:
            if under(path, owned) and len(owned) > best_length:
                best, best_length = step.slug, len(owned)
    return best or GROUP_OWNERS.get(path, FIRST)


def on_target(problem: Problem) -> bool:
    """The target's own answer about no field in particular (the cluster's server-side dry
    run, or what this machine lacks): Review shows it, as the outcome on the profile's
    cluster."""
    return problem.origin == "target" and problem.path == TARGET and not problem.about


def step_of(problem: Problem) -> str:
    """The step that shows this problem: its owner's, and the target's answer about no field
    in particular at Review."""
    return LAST if on_target(problem) else owner(problem)


def by_step(problems: Iterable[Problem]) -> dict[str, list[Problem]]:
    """Problems sorted to the step that shows each (step_of), every step present (maybe
    empty)."""
    sorted_: dict[str, list[Problem]] = {slug: [] for slug in SLUGS}
    for problem in problems:
        sorted_[step_of(problem)].append(problem)
    return sorted_


def first_blocked(refusals_by_step: dict[str, list[Problem]]) -> str | None:
    """The first step with a refusal pending; None when Review may be reached."""
    for slug in SLUGS:
        if refusals_by_step.get(slug):
            return slug
    return None
