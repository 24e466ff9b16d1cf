"""spec.rollout: parsed, defaulted and checked (each field's default and each rule), its JSON
schema, and what the filled manifest says to the reconciler (plan_of)."""

import pytest

from jobs.manifest import parse
from jobs.manifest.json_schema import manifest_json_schema
from jobs.manifest.rollout import KUBERNETES_CANARY_NAME_MAX, RolloutPlan, plan_of
from tests.jobs.manifest.manifest_support import context, m, profile

LOCAL = {"prod-inference": profile(backend="local")}


def parsed(changes: dict, profiles=None):
    return parse(m(changes), context(profiles=profiles or LOCAL))


def test_no_rollout_leaves_the_manifest_as_before_and_replaces():
    result = parsed({})
    assert result.ok and "rollout" not in result.manifest["spec"]
    assert plan_of(result.manifest) == RolloutPlan() and not plan_of(result.manifest).canary


def test_canary_fills_every_limit_with_its_default():
    result = parsed({"spec.rollout": {"strategy": "Canary"}})
    assert result.ok, [str(p) for p in result.problems()]
    assert result.manifest["spec"]["rollout"] == {
        "strategy": "Canary",
        "steps": [10, 50],
        "stepDuration": "10m",
        "maxErrorRateIncrease": 0.02,
        "maxLatencyIncrease": 0.25,
        "minRequests": 100,
    }
    plan = plan_of(result.manifest)
    assert plan.canary and plan.steps == (10, 50) and plan.step_seconds == 600


def test_given_values_are_kept():
    rollout = {
        "strategy": "Canary",
        "steps": [5, 25, 75],
        "stepDuration": "30s",
        "maxErrorRateIncrease": 0.01,
        "maxLatencyIncrease": 0.5,
        "minRequests": 20,
    }
    result = parsed({"spec.rollout": rollout})
    assert result.ok and result.manifest["spec"]["rollout"] == rollout
    plan = plan_of(result.manifest)
    assert (plan.steps, plan.step_seconds, plan.min_requests) == ((5, 25, 75), 30, 20)
    assert RolloutPlan.of_dict(plan.as_dict()) == plan


def test_replace_is_the_default_strategy():
    result = parsed({"spec.rollout": {"strategy": "Replace"}})
    assert result.ok and result.manifest["spec"]["rollout"] == {"strategy": "Replace"}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("strategy", "BlueGreen", "or Canary"),
        ("steps", [50, 10], "not above the step before it"),
        ("steps", [10, 100], "outside 1 to 99"),
        ("steps", [], "0 steps"),
        ("steps", ["10"], "whole percent"),
        ("steps", list(range(1, 13)), "12 steps"),
        ("steps", 10, "not a list"),
        ("stepDuration", "10 minutes", "not a duration"),
        ("maxErrorRateIncrease", 2, "above 1"),
        ("maxErrorRateIncrease", -0.1, "below 0"),
        ("maxLatencyIncrease", "0.25", "text"),
        ("minRequests", 0, "1 to 1000000"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field, value, says):
    result = parsed({"spec.rollout": {"strategy": "Canary", field: value}})
    refusal = next(p for p in result.refusals if p.path == f"spec.rollout.{field}")
    assert says in refusal.message, refusal.message
    assert "accepts" in refusal.message


def test_limits_without_canary_are_a_warning():
    result = parsed({"spec.rollout": {"steps": [10]}})
    assert result.ok
    warning = next(p for p in result.warnings if p.path == "spec.rollout.steps")
    assert "Set strategy to Canary" in warning.message


def test_canary_runs_on_kubernetes_for_a_model_served_in_containers():
    result = parse(m({"spec.rollout": {"strategy": "Canary"}}), context())
    assert result.ok, [str(p) for p in result.problems()]
    assert plan_of(result.manifest).canary


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"runtime.isolation": "VirtualMachine"}, "isolation VirtualMachine is replaced"),
        ({"format": "SKLearn", "runtime.engine": "sklearn"}, "runtime.engine is sklearn"),
        ({"spec.name": "a" * (KUBERNETES_CANARY_NAME_MAX + 1)}, "accepts names of at most 46"),
    ],
)
def test_canary_on_kubernetes_refuses_what_a_second_inference_service_cannot_serve(changes, says):
    result = parse(m({"spec.rollout": {"strategy": "Canary"}, **changes}), context())
    refusal = next(p for p in result.refusals if p.path == "spec.rollout.strategy")
    assert says in refusal.message and "Replace" in refusal.message, refusal.message


def test_a_name_of_the_longest_length_is_accepted_with_canary_on_kubernetes():
    name = "a" * KUBERNETES_CANARY_NAME_MAX
    result = parse(m({"spec.rollout": {"strategy": "Canary"}, "spec.name": name}), context())
    assert not [p for p in result.refusals if p.path.startswith("spec.rollout")]


def test_canary_needs_a_model_that_stays_up():
    result = parsed({"spec.rollout": {"strategy": "Canary"}, "scaling.minReplicas": 0})
    refusal = next(p for p in result.refusals if p.path == "spec.rollout.strategy")
    assert "minReplicas is 0" in refusal.message


def test_the_json_schema_describes_the_rollout():
    rollout = manifest_json_schema()["properties"]["spec"]["properties"]["rollout"]
    assert rollout["properties"]["strategy"]["enum"] == ["Replace", "Canary"]
    steps = rollout["properties"]["steps"]
    assert steps["type"] == "array" and steps["items"]["maximum"] == 99
    assert rollout["properties"]["minRequests"]["minimum"] == 1
