"""Check model reads an Azure Blob model folder through the real azure-storage-blob client
against Azurite (tests/fakes/azure.py): the same verdicts as the Hub's, S3's and GCS's; a
private container refused without credentials and read with the account's key."""

from __future__ import annotations

from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.azure_reads import AzureReader, split_url
from tests.fakes.azure import ACCOUNT, ACCOUNT_KEY
from tests.models_catalog.bucket_check_support import check, tiny_files

KEYS = Credentials("keys", ACCOUNT, ACCOUNT_KEY)


def test_a_public_folder_is_checked_from_its_headers_alone(azure):
    files, parameters = tiny_files(shards=2)
    azure.folder("models", "tiny/", files, public=True)
    result = check(azure.uri("models", "tiny"))
    assert result.can_serve, result.verdict
    assert result.architecture == "LlamaForCausalLM"
    assert result.parameters == parameters and result.weight_source == "headers"
    assert result.storage_private is False


def test_a_private_container_is_refused_without_credentials_and_read_with_them(azure):
    files, parameters = tiny_files()
    azure.folder("private", "tiny/", files)
    uri = azure.uri("private", "tiny")
    refused = check(uri)
    assert not refused.can_serve and refused.about_storage and refused.storage_private
    assert "private" in refused.verdict and "storageCredentials" in refused.next_step
    read = check(uri, KEYS)
    assert read.can_serve, read.verdict
    assert read.parameters == parameters
    assert read.storage_private is True  # the anonymous byte was refused


def test_machine_credentials_are_not_read_for_azure(azure):
    azure.folder("private", "tiny/", tiny_files()[0])
    refused = check(azure.uri("private", "tiny"), Credentials("machine"))
    assert not refused.can_serve
    assert "machine, which is not read for Azure Blob" in refused.verdict


def test_a_ranged_read_is_what_it_asked_for(azure):
    azure.folder("models", "tiny/", {"blob.bin": bytes(range(256)) * 8}, public=True)
    bucket = f"{ACCOUNT}.blob.core.windows.net/models"
    assert AzureReader(ANONYMOUS).read_range(bucket, "tiny/blob.bin", 3, 10) == bytes(range(3, 11))


def test_a_url_is_split_into_its_container_and_path():
    url = "https://acct.blob.core.windows.net/models/llama/v1"
    assert split_url(url) == ("acct.blob.core.windows.net/models", "llama/v1")
