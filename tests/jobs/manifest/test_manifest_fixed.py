"""Fields fixed across revisions: once the application exists, and once its model served."""

from __future__ import annotations

import pytest

from jobs.manifest import parse

# tests/ may or may not be a package (both layouts are in use); the support module is
# found either way.
try:
    from .manifest_support import COMMIT, bare_profile, context, existing, m, profile
except ImportError:
    from manifest_support import COMMIT, bare_profile, context, existing, m, profile

P = "spec.source.model"
PINNED = f"hf://BAAI/bge-m3:{COMMIT}"
OTHER = "hf://BAAI/bge-m3:" + "0" * 40
BASE = m({"uri": PINNED, "queue.name": "gpu-queue"})


def _previous():
    result = parse(BASE, context())
    assert result.ok, result.refusals
    return result.manifest


# (id, changes, served, path or None when accepted, phrase)
CASES = [
    ("same-before-served", {}, False, None, ""),
    ("same-after-served", {}, True, None, ""),
    (
        "namespace-exists",
        {"spec.namespace": "team-a"},
        False,
        "spec.namespace",
        "fixed since the application was created on 2025-03-04 10:30 UTC",
    ),
    (
        "profile-exists",
        {"spec.profileName": "prod-2"},
        False,
        "spec.profileName",
        "delete the application and create it again under a new name",
    ),
    (
        "queue-exists",
        {"queue.name": "cpu-queue"},
        False,
        f"{P}.queue.name",
        "it was 'gpu-queue', now 'cpu-queue'",
    ),
    ("queue-removed", {"queue.name": None}, False, f"{P}.queue.name", "now null"),
    ("uri-before-served", {"uri": OTHER}, False, None, ""),
    (
        "uri-after-served",
        {"uri": OTHER},
        True,
        f"{P}.uri",
        "fixed since the model first served on 2025-03-05 08:00 UTC",
    ),
    ("format-before-served", {"uri": "s3://bkt/m", "format": "vLLM"}, False, None, ""),
    (
        "format-after-served",
        {"format": "SKLearn"},
        True,
        f"{P}.format",
        "it was 'vLLM'",
    ),
    ("engine-before-served", {"runtime.engine": "my-vllm"}, False, None, ""),
    (
        "engine-after-served",
        {"runtime.engine": "my-vllm"},
        True,
        f"{P}.runtime.engine",
        "Set it back to 'vllm'",
    ),
    ("isolation-before-served", {"runtime.isolation": "VirtualMachine"}, False, None, ""),
    (
        "isolation-after-served",
        {"runtime.isolation": "VirtualMachine"},
        True,
        f"{P}.runtime.isolation",
        "first served",
    ),
    ("scaling-after-served", {"scaling.maxReplicas": 3}, True, None, ""),
    ("name-after-served", {"spec.name": "bge-2"}, True, None, ""),
]


@pytest.mark.parametrize(
    ("changes", "served", "path", "phrase"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_fixed_fields(changes, served, path, phrase):
    profiles = {"prod-inference": profile(), "prod-2": profile("prod-2"), "bare": bare_profile()}
    ctx = context(profiles=profiles, existing=existing(_previous(), served=served))
    result = parse(m(changes, base=BASE), ctx)
    if path is None:
        assert result.ok, result.refusals
        return
    assert [p.path for p in result.refusals] == [path], [str(p) for p in result.refusals]
    assert phrase in result.refusals[0].message


def test_changing_source_type_of_an_existing_app_is_refused():
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "spec": {"predictor": {}},
    }
    ctx = context(existing=existing(_previous()))
    result = parse(m({"spec.source": {"type": "YAML", "inferenceService": isvc}}), ctx)
    assert [p.path for p in result.refusals] == ["spec.source.type"]
    assert "was 'Model', now 'YAML'" in result.refusals[0].message


def test_a_wrong_value_is_not_also_reported_as_a_change():
    ctx = context(existing=existing(_previous(), served=True))
    result = parse(m({"runtime.engine": "Not_A_Name"}, base=BASE), ctx)
    assert [p.path for p in result.refusals] == [f"{P}.runtime.engine"]
    assert "DNS-1123" in result.refusals[0].message


def test_get_of_an_existing_served_app_parses_back_unchanged():
    previous = _previous()
    ctx = context(existing=existing(previous, served=True))
    again = parse(previous, ctx)
    assert again.ok and again.manifest == previous


def test_odd_previous_manifest_does_not_break_the_check():
    ctx = context(existing=existing({"spec": "garbage"}, served=True))
    assert parse(BASE, ctx).ok
