"""Azure Blob folders on the local backend's CPU runtimes, through the same download path as
s3:// and gs:// folders: read at apply with the profile's Shared Key (Azurite, the real
azure-storage-blob client), each file the runtime reads pinned to its ETag (Azurite keeps no
blob versions; where an account does, its version id), downloaded by the replica itself with
If-Match on that ETag, then the runtime started on the folder offline without the key. A blob
replaced since apply fails the replica with the reason and the next step, never with the new
bytes; a private container without credentials is refused naming storageCredentials."""

from __future__ import annotations

import json

import pytest

from jobs.storage_access import Credentials
from tests.fakes.azure import ACCOUNT, ACCOUNT_KEY
from tests.jobs.backends.local.bucket_downloads_support import (
    WANTED,
    assert_fails_without_its_pinned_config,
    assert_private,
    assert_served_offline,
    chat_files,
    chat_running,
    downloading_machine,
    planned_download,
    runner_for,
)
from tests.jobs.backends.local.test_local_cpu_wiring import manifest

KEYS = Credentials("keys", ACCOUNT, ACCOUNT_KEY)


@pytest.fixture
def azure_machine(cpu_machine, tmp_path, settings, azure):
    downloading_machine(cpu_machine, tmp_path, settings)
    azure.folder("private", "chat/", chat_files(tmp_path))
    uri = azure.uri("private", "chat")
    return azure, uri, uri + "/"


def etags(azure) -> dict[str, str]:
    container = azure.client().get_container_client("private")
    return {
        n: str(container.get_blob_client("chat/" + n).get_blob_properties().etag).strip('"')
        for n in WANTED
    }


def test_a_private_folder_is_downloaded_at_its_pinned_etags_then_served_offline(
    azure_machine, tmp_path
):
    azure, uri, source = azure_machine
    assert_private(tmp_path, uri, KEYS)
    with chat_running(tmp_path, uri, KEYS) as runner:
        pinned = etags(azure)
        pins = {n: f"etag:{pinned[n]}" for n in WANTED}
        served = assert_served_offline(runner, tmp_path, source, pins)
        assert served.folder.parent.parent.name.startswith(f"az--{ACCOUNT}--private--")
        assert not [k for k in served.env if k.startswith("SERVEDECK_AZURE")]
        assert ACCOUNT_KEY not in json.dumps(served.env)
        assert ACCOUNT_KEY not in served.log


def test_a_blob_replaced_since_apply_fails_the_replica_with_the_reason(azure_machine, tmp_path):
    azure, uri, source = azure_machine
    with chat_running(tmp_path, uri, KEYS) as runner:
        planned = planned_download(tmp_path)
        assert dict(planned["versions"])["config.json"] == f"etag:{etags(azure)['config.json']}"
        # config.json is replaced (another ETag) and taken from disk: the next start
        # downloads the bytes pinned at apply, or nothing.
        azure.folder("private", "chat/", {"config.json": b"{}"})
        assert_fails_without_its_pinned_config(runner, tmp_path, planned, source)


def test_machine_credentials_are_refused_naming_storage_credentials(azure_machine, tmp_path):
    _, uri, _ = azure_machine
    machine = Credentials("machine")
    runner = runner_for(tmp_path, KEYS)
    refusals = [p.message for p in runner.check(manifest("chat", uri), None, machine)]
    assert len(refusals) == 1 and "storageCredentials" in refusals[0], refusals
