"""Check model reads a model folder in an S3 bucket like a Hub repository: the real boto3
client against moto's S3 server, real small files uploaded (a tiny Llama's config and
safetensors built by the fake Hub's builders), the same verdicts and sizing; a private bucket
refused without credentials and read with them; the reads counted on the server: the headers'
ranges only, never the weights."""

from __future__ import annotations

import json

import pytest

from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.check import check_model
from models_catalog.s3_reads import S3Reader, location_region
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.models_catalog.bucket_check_support import (
    CATALOG,
    TINY,
    assert_checked_from_headers_alone,
    check,
    tiny_files,
)

KEYS = Credentials("keys", ACCESS_KEY_ID, SECRET_ACCESS_KEY)


def weight_reads(s3) -> list:
    return [r for r in s3.requests() if r.method == "GET" and r.path.endswith(".safetensors")]


def test_a_public_folder_is_checked_from_its_headers_alone(s3):
    files, parameters = tiny_files()
    s3.folder("models", "tiny-llama/", files, public=True)
    result = check("s3://models/tiny-llama")
    assert_checked_from_headers_alone(
        result, parameters, weight_reads(s3), files["model.safetensors"]
    )
    assert result.suggestion is not None
    assert not any(r.signed for r in s3.requests())  # anonymous: nothing was signed


def test_a_sharded_folder_reads_each_shards_header(s3):
    files, parameters = tiny_files(shards=3)
    s3.folder("models", "sharded/", files, public=True)
    result = check("s3://models/sharded/")
    assert result.can_serve, result.verdict
    assert result.parameters == parameters
    reads = weight_reads(s3)
    assert len(reads) == 6 and all(r.range for r in reads)
    assert {r.path.rsplit("/", 1)[1] for r in reads} == {
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
    }


def test_a_private_bucket_is_refused_without_credentials_and_read_with_them(s3):
    files, parameters = tiny_files()
    s3.folder("private-models", "tiny/", files)
    refused = check("s3://private-models/tiny")
    assert not refused.can_serve
    assert refused.about_storage and refused.storage_private
    assert "private" in refused.verdict and "storageCredentials" in refused.next_step
    assert not any(r.range for r in weight_reads(s3))  # refused before any weight was read

    s3.forget()
    read = check("s3://private-models/tiny", KEYS)
    assert read.can_serve, read.verdict
    assert read.parameters == parameters
    assert read.storage_private is True  # anonymous reads refused: the cluster needs access
    signed = [r for r in s3.requests() if r.signed]
    assert len(weight_reads(s3)) == 2 and all(r.signed for r in weight_reads(s3))
    # The one anonymous read: a byte of config.json, asking whether anyone may read it.
    unsigned = [r for r in s3.requests() if not r.signed]
    assert [(r.path, r.range) for r in unsigned] == [
        ("/private-models/tiny/config.json", "bytes=0-0")
    ]
    assert signed


def test_the_same_refusals_as_the_hub(s3):
    files, _ = tiny_files()
    unknown = {**TINY, "architectures": ["NoSuchModelForCausalLM"]}
    s3.folder(
        "models", "no-config/", {k: v for k, v in files.items() if k != "config.json"}, public=True
    )
    s3.folder(
        "models", "unknown/", {**files, "config.json": json.dumps(unknown).encode()}, public=True
    )
    s3.folder("models", "no-weights/", {"config.json": files["config.json"]}, public=True)
    assert "has no config.json" in check("s3://models/no-config").verdict
    unsupported = check("s3://models/unknown")
    assert not unsupported.can_serve and "NoSuchModelForCausalLM" in unsupported.verdict
    weights = check("s3://models/no-weights")
    assert not weights.can_serve and "has no weights vLLM reads" in weights.verdict


def test_a_context_above_the_models_own_is_refused_by_the_same_rule(s3):
    files, _ = tiny_files()
    s3.folder("models", "tiny/", files, public=True)
    result = check("s3://models/tiny", context_tokens=4096)  # its config says 2048
    assert not result.can_serve
    assert "4096" in result.verdict or "4,096" in result.verdict  # above its 2048 tokens


def test_missing_folders_and_buckets_are_refused_by_name(s3):
    s3.folder("models", "tiny/", tiny_files()[0], public=True)
    missing = check("s3://models/elsewhere")
    assert not missing.can_serve and "no objects under it" in missing.verdict
    assert "s3://models/elsewhere" in missing.verdict
    assert not check("s3://no-such-bucket/tiny").can_serve


def test_a_header_longer_than_any_checkpoints_is_refused_unread(s3):
    files, _ = tiny_files()
    files["model.safetensors"] = (2**40).to_bytes(8, "little") + b"{}"
    s3.folder("models", "huge-header/", files, public=True)
    result = check("s3://models/huge-header")
    assert not result.can_serve and "does not start with a safetensors header" in result.verdict
    assert [r.range for r in weight_reads(s3)] == ["bytes=0-7"]


def test_an_unreachable_endpoint_is_inconclusive(s3, monkeypatch):
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    result = check("s3://models/tiny")
    assert result.inconclusive and "AWS_ENDPOINT_URL_S3" in result.next_step


def test_every_read_shares_one_deadline(s3, monkeypatch):
    from models_catalog import s3_reads

    s3.folder("models", "tiny/", tiny_files()[0], public=True)
    monkeypatch.setattr(s3_reads, "TIME_BUDGET", 0.0)  # spent before the first read
    result = check("s3://models/tiny")
    assert result.inconclusive and "no answer within 0 s" in result.verdict
    assert s3.requests() == []


def test_a_predictive_format_is_not_read(s3):
    result = check_model("s3://models/iris", catalog=CATALOG, format="SKLearn")
    assert result.can_serve and result.runtime == "sklearn"
    assert s3.requests() == []


@pytest.mark.parametrize("secret", [SECRET_ACCESS_KEY, ACCESS_KEY_ID])
def test_no_credential_reaches_an_answer(s3, secret):
    s3.folder("private-models", "tiny/", tiny_files()[0])
    for storage in (ANONYMOUS, KEYS):
        result = check("s3://private-models/tiny", storage)
        assert secret not in json.dumps(result.as_dict())


@pytest.mark.parametrize("credentials", [KEYS, ANONYMOUS], ids=["keys", "anonymous"])
def test_a_buckets_region_is_read_with_or_without_credentials(s3, credentials):
    s3.folder("far-models", "tiny/", tiny_files()[0], region="eu-west-1")
    s3.folder("near-models", "tiny/", tiny_files()[0])
    reader = S3Reader(credentials)
    assert reader.bucket_region("far-models") == "eu-west-1"
    assert reader.bucket_region("near-models") == "us-east-1"
    assert reader.bucket_region("no-such-bucket") is None


@pytest.mark.parametrize(
    ("constraint", "region"),
    [(None, "us-east-1"), ("", "us-east-1"), ("EU", "eu-west-1"), ("ap-south-1", "ap-south-1")],
)
def test_a_location_constraint_names_its_region(constraint, region):
    assert location_region(constraint) == region
