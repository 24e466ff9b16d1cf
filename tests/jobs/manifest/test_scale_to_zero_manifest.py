"""scaling.minReplicas: 0 and scaling.scaleToZeroAfter: parsed, defaulted and checked; what
the filled manifest says to the reconciler (FilledManifest.sleep_after_seconds)."""

import pytest

from jobs.manifest import parse
from jobs.manifest.checks import duration_seconds
from jobs.manifest.json_schema import manifest_json_schema
from jobs.manifest.view import FilledManifest
from tests.jobs.manifest.manifest_support import context, m, profile

LOCAL = {"prod-inference": profile(backend="local")}


def parsed(changes: dict, **kw):
    return parse(m(changes), context(profiles=LOCAL, **kw))


def scaling_of(result) -> dict:
    return result.manifest["spec"]["source"]["model"]["scaling"]


def test_min_replicas_0_is_accepted_on_a_local_profile_with_15m_by_default():
    result = parsed({"scaling.minReplicas": 0})
    assert result.ok, [str(p) for p in result.problems()]
    scaling = scaling_of(result)
    assert scaling["minReplicas"] == 0 and scaling["maxReplicas"] == 1
    assert scaling["scaleToZeroAfter"] == "15m" and scaling["metric"] is None
    filled = FilledManifest(result.manifest)
    assert filled.sleep_after_seconds == 900 and filled.replicas == 1


def test_a_short_scale_to_zero_after_is_kept():
    result = parsed({"scaling.minReplicas": 0, "scaling.scaleToZeroAfter": "2s"})
    assert result.ok and scaling_of(result)["scaleToZeroAfter"] == "2s"
    assert FilledManifest(result.manifest).sleep_after_seconds == 2


def test_a_model_that_never_sleeps_has_no_scale_to_zero_after():
    result = parsed({})
    assert "scaleToZeroAfter" not in scaling_of(result)
    assert FilledManifest(result.manifest).sleep_after_seconds is None


@pytest.mark.parametrize(
    "value", ["0s", "15", "1d", "15 minutes", 900, "721h", "", "9" * 5000 + "h", "1h" * 40]
)
def test_what_is_not_a_duration_from_1s_to_720h_is_refused(value):
    result = parsed({"scaling.minReplicas": 0, "scaling.scaleToZeroAfter": value})
    paths = [p.path for p in result.refusals]
    assert paths == ["spec.source.model.scaling.scaleToZeroAfter"], paths


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605), ("m", None)],
)
def test_durations(text, seconds):
    assert duration_seconds(text) == seconds


def test_scale_to_zero_after_without_min_replicas_0_is_a_warning():
    result = parsed({"scaling.minReplicas": 1, "scaling.scaleToZeroAfter": "5m"})
    assert result.ok
    paths = [p.path for p in result.warnings]
    assert "spec.source.model.scaling.scaleToZeroAfter" in paths, paths


def test_kubernetes_takes_min_replicas_0_at_one_replica_while_awake():
    result = parse(m({"scaling.minReplicas": 0}), context())
    assert result.ok, [str(p) for p in result.problems()]
    assert scaling_of(result)["maxReplicas"] == 1


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"scaling.maxReplicas": 3}, "scaling.maxReplicas", "does not scale up from zero"),
        (
            {"resources.nodesPerReplica": 2, "resources.accelerator.gpu.countPerReplica": 1},
            "scaling.minReplicas",
            "worker Deployment",
        ),
        ({"runtime.isolation": "VirtualMachine"}, "scaling.minReplicas", "virtual machine"),
    ],
)
def test_what_kubernetes_cannot_scale_to_zero_is_refused_naming_the_field(changes, path, words):
    result = parse(m({"scaling.minReplicas": 0, **changes}), context())
    refusal = next((p for p in result.refusals if p.path.endswith(path)), None)
    assert refusal is not None, [str(p) for p in result.refusals]
    assert words in refusal.message


def test_the_json_schema_describes_the_new_field():
    scaling = manifest_json_schema()["properties"]["spec"]["properties"]["source"]["properties"][
        "model"
    ]["properties"]["scaling"]["properties"]
    assert scaling["minReplicas"]["minimum"] == 0
    assert scaling["scaleToZeroAfter"]["type"] == "string"


def test_the_dry_run_says_it_sleeps():
    from jobs.manifest.describe import scaling_of

    result = parsed({"scaling.minReplicas": 0, "scaling.scaleToZeroAfter": "5m"})
    assert scaling_of(result.manifest) == (
        "fixed at 1 replica while awake; sleeps (no replica) after 5m without a request, and "
        "the next request wakes it"
    )
    assert scaling_of(parsed({}).manifest) == "fixed at 1 replica"


@pytest.mark.parametrize(
    ("backend", "words"),
    [
        ("local", ["After 5m without a request", "processes on this machine stop", "freed"]),
        (
            "kubernetes",
            [
                "After 5m without a request",
                "spec.predictor.minReplicas 0 and serving.kserve.io/autoscalerClass none",
                "Deployment to zero replicas",
                "none holds a GPU",
                "KServe 0.15.1 or later in Standard mode",
                "list and watch EndpointSlices",
            ],
        ),
    ],
)
def test_the_dry_run_says_what_sleeping_means_on_the_target(backend, words):
    from jobs.manifest.describe import sleeping_of

    result = parsed({"scaling.minReplicas": 0, "scaling.scaleToZeroAfter": "5m"})
    said = sleeping_of(result.manifest, backend)
    for phrase in words:
        assert phrase in said, said
    assert sleeping_of(parsed({}).manifest, backend) == ""
