"""Check model reads a gs:// model folder through the real google-cloud-storage client against
a GCS emulator (tests/fakes/gcs.py): config.json and the tokenizer's files whole within their
bound, the safetensors headers by ranged reads (never the weights), the same verdicts as the
Hub's and S3's, and the same refusals."""

from __future__ import annotations

import pytest

from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.gcs_reads import GCSReader
from tests.models_catalog.bucket_check_support import (
    assert_checked_from_headers_alone,
    check,
    tiny_files,
)

KEYS = Credentials("keys", "AKID", "secret")


def weight_reads(gcs) -> list:
    return [r for r in gcs.requests() if r.method == "GET" and "safetensors" in r.path]


def test_a_folder_is_checked_from_its_headers_alone(gcs):
    files, parameters = tiny_files()
    gcs.folder("models", "tiny-llama/", files)
    result = check("gs://models/tiny-llama")
    assert_checked_from_headers_alone(
        result, parameters, weight_reads(gcs), files["model.safetensors"]
    )


def test_a_sharded_folder_reads_each_shards_header(gcs):
    files, parameters = tiny_files(shards=3)
    gcs.folder("models", "sharded/", files)
    result = check("gs://models/sharded/")
    assert result.can_serve, result.verdict
    assert result.parameters == parameters
    reads = weight_reads(gcs)
    assert len(reads) == 6 and all(r.range for r in reads)


def test_a_missing_folder_and_a_folder_without_config_are_refused(gcs):
    gcs.folder("models", "tiny/", tiny_files()[0])
    missing = check("gs://models/nothing-here")
    assert not missing.can_serve
    assert "gs://models/nothing-here" in missing.verdict and "no objects" in missing.verdict
    gcs.folder(
        "models", "weights-only/", {"model.safetensors": tiny_files()[0]["model.safetensors"]}
    )
    assert not check("gs://models/weights-only").can_serve


def test_a_generation_on_a_folder_is_said_to_pin_one_object(gcs):
    gcs.folder("models", "tiny/", tiny_files()[0])
    result = check("gs://models/tiny?generation=1234")
    assert result.can_serve, result.verdict
    assert any("generation pins one object" in w for w in result.warnings), result.warnings


def test_an_s3_key_pair_is_not_used_for_gs_and_the_refusal_says_what_to_use(gcs):
    gcs.folder("models", "tiny/", tiny_files()[0])
    refused = check("gs://models/tiny", KEYS)
    assert not refused.can_serve and refused.about_storage
    assert "reads S3 only" in refused.verdict and "machine" in refused.verdict
    assert gcs.requests() == []  # nothing was sent with them


def test_an_unreachable_endpoint_is_inconclusive(gcs, monkeypatch):
    from tests.fakes.kube import closed_port

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{closed_port()}")
    result = check("gs://models/tiny")
    assert result.inconclusive and "STORAGE_EMULATOR_HOST" in result.next_step


@pytest.mark.parametrize("wanted", [1, 8, 100])
def test_a_ranged_read_never_keeps_more_than_it_asked_for(gcs, wanted):
    gcs.folder("models", "tiny/", {"blob.bin": bytes(range(256)) * 8})
    data = GCSReader(ANONYMOUS).read_range("models", "tiny/blob.bin", 3, 3 + wanted - 1)
    assert data == (bytes(range(256)) * 8)[3 : 3 + wanted]


def test_a_buckets_location_is_read(gcs):
    gcs.folder("eu-models", "tiny/", tiny_files()[0], location="EUROPE-WEST4")
    assert GCSReader(ANONYMOUS).bucket_region("eu-models") == "EUROPE-WEST4"
    assert GCSReader(ANONYMOUS).bucket_region("no-such-bucket") is None


def test_machine_credentials_read_through_the_clients_own_chain(gcs):
    # With STORAGE_EMULATOR_HOST set, the client's own chain is the emulator's anonymous one.
    gcs.folder("models", "tiny/", tiny_files()[0])
    result = check("gs://models/tiny", Credentials("machine"))
    assert result.can_serve, result.verdict
    assert any(r.method == "GET" for r in gcs.requests())
