"""The download-cost decision (jobs.storage_region): a table of the bucket's region against the
cluster's nodes' regions, and what the warning says."""

from __future__ import annotations

import pytest

from jobs.storage_region import region_warning, regions, single_region

URI = "s3://models/tiny"


@pytest.mark.parametrize(
    ("bucket", "nodes", "warned"),
    [
        ("eu-west-1", ["us-east-1"], True),
        ("eu-west-1", ["us-east-1", "us-east-1"], True),
        ("us-east-1", ["us-east-1"], False),
        ("US-CENTRAL1", ["us-central1"], False),  # GCS's spelling of GKE's region
        ("eu-west-1", ["us-east-1", "eu-west-1"], False),  # nodes in the bucket's region too
        (None, ["us-east-1"], False),  # the bucket's region unknown: nothing said
        ("eu-west-1", [], False),  # no node says its region
        ("eu-west-1", ["", None], False),
        ("eu west 1; rm -rf", ["us-east-1"], False),  # not a region: not repeated
        ("eu-west-1", ["<b>x</b>"], False),
    ],
)
def test_warned_only_when_both_regions_are_known_and_differ(bucket, nodes, warned):
    assert (region_warning(URI, bucket, nodes, "prod") is not None) is warned


def test_the_warning_names_both_regions_the_cost_and_the_fixes():
    said = region_warning(URI + "?versionId=abc", "eu-west-1", ["us-east-1"], "prod")
    assert said.startswith("s3://models/tiny is in region eu-west-1, and cluster prod's nodes")
    assert "us-east-1 (their topology.kubernetes.io/region label)" in said
    assert "per GB" in said and "NAT gateway" in said
    assert "bucket in us-east-1" in said and "spec.source.model.uri" in said
    assert "spec.source.model.cache.enabled: true" in said


def test_with_the_weight_cache_on_only_a_copy_is_proposed():
    said = region_warning(URI, "eu-west-1", ["us-east-1", "us-west-2"], "prod", cache_enabled=True)
    assert "us-east-1 and us-west-2" in said
    assert "a bucket in one of us-east-1, us-west-2" in said
    assert "cache.enabled: true" not in said


def test_regions_are_distinct_lowercase_and_sorted():
    assert regions(["us-east-1", "US-EAST-1", "eu-west-1", None, ""]) == ("eu-west-1", "us-east-1")


@pytest.mark.parametrize(
    ("scheme", "location", "region"),
    [
        ("gs", "US-EAST1", "US-EAST1"),
        ("gs", "US", None),  # a multi-region
        ("gs", "NAM4", None),  # a dual-region
        ("s3", "eu-west-1", "eu-west-1"),
        ("s3", None, None),
    ],
)
def test_only_a_single_region_is_compared(scheme, location, region):
    assert single_region(scheme, location) == region
