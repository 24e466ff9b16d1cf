"""FilledManifest: typed accessors over a filled-in manifest, safe on any stored shape."""

import pytest

from jobs.manifest import parse
from jobs.manifest.view import FilledManifest, dig
from tests.jobs.manifest.manifest_support import GPU, context, m


def test_the_accessors_read_what_parse_filled_in():
    filled = FilledManifest(parse(m({**GPU, "scaling.minReplicas": 2}), context()).manifest)
    assert filled.name and filled.profile_name == "prod-inference"
    assert filled.namespace == "ml-serving" and filled.sync_type == "Auto"
    assert filled.source_type == "Model" and filled.format == "vLLM"
    assert filled.on_gpu and filled.gpu_count == 1 and filled.replicas == 2
    assert filled.engine == "vllm"


@pytest.mark.parametrize("data", [{}, {"spec": "text"}, {"spec": {"source": ["a"]}}, None, []])
def test_any_shape_reads_as_unknown_not_an_error(data):
    filled = FilledManifest(data)
    assert filled.name is None and filled.uri is None and filled.gpu_count is None
    assert filled.min_replicas == 1 and filled.sync_type == "Auto" and not filled.on_gpu


def test_dig_stops_at_what_is_not_a_mapping():
    assert dig({"a": {"b": 3}}, "a", "b") == 3
    assert dig({"a": 3}, "a", "b") is None
    assert dig({"a": {"b": True}}, "a") == {"b": True}
