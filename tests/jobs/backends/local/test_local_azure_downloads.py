"""Azure Blob folders on the local backend's CPU runtimes, through the same download path as
s3:// and gs:// folders: read at apply with the profile's Shared Key (Azurite, the real
azure-storage-blob client), each file the runtime reads pinned to its ETag (Azurite keeps no
blob versions; where an account does, its version id), downloaded by the replica itself with
If-Match on that ETag, then the runtime started on the folder offline without the key. A blob
replaced since apply fails the replica with the reason and the next step, never with the new
bytes; a private container without credentials is refused naming storageCredentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends.local import download_files
from jobs.backends.local.runner import LocalRunner
from jobs.storage_access import Credentials
from tests.fakes.azure import ACCOUNT, ACCOUNT_KEY
from tests.fakes.cpu_runtime import install_fake
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, seen
from tests.jobs.backends.local.test_local_gcs_downloads import WANTED, chat_files
from tests.jobs.backends.local.test_local_hub_downloads import failed

KEYS = Credentials("keys", ACCOUNT, ACCOUNT_KEY)


@pytest.fixture
def azure_machine(cpu_machine, tmp_path, settings, azure):
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    azure.folder("private", "chat/", chat_files(tmp_path))
    uri = azure.uri("private", "chat")
    return azure, uri, uri + "/"


def runner_for(tmp_path, storage: Credentials | None = KEYS) -> LocalRunner:
    return LocalRunner(tmp_path / "state" / "acme", template=None, storage_for=lambda _: storage)


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
    runner = runner_for(tmp_path)
    chat = manifest("chat", uri)
    refused = [p.message for p in runner.check(chat)]  # no credentials: anonymous
    assert len(refused) == 1 and "storageCredentials" in refused[0], refused
    assert runner.check(chat, storage=KEYS) == []
    try:
        runner.apply("chat", chat, 1)
        running(runner, "chat")
        files = chat_files(tmp_path)
        pinned = etags(azure)
        pins = [(n, len(files[n]), f"etag:{pinned[n]}") for n in WANTED]
        commit = download_files.folder_pin(pins)
        folder = download_files.snapshot_folder(tmp_path / "downloads", source, commit)
        assert folder.parent.parent.name.startswith(f"az--{ACCOUNT}--private--")
        assert sorted(p.name for p in folder.iterdir()) == WANTED  # never the ONNX copy
        assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
        given = seen(runner, "chat")
        assert (Path(given["cwd"]) / "chat").resolve() == folder.resolve()
        env = given["env"]
        assert env["HF_HUB_OFFLINE"] == "1"
        assert not [k for k in env if k.startswith("SERVEDECK_AZURE")]
        assert ACCOUNT_KEY not in json.dumps(env)
        log = "\n".join(runner.tail("chat", 100))
        assert f"servedeck download: {source} at {commit[:12]}: 3 files" in log
        assert f"servedeck download: {source} is complete in {folder}" in log
        assert ACCOUNT_KEY not in log
    finally:
        runner.shutdown()


def test_a_blob_replaced_since_apply_fails_the_replica_with_the_reason(azure_machine, tmp_path):
    azure, uri, source = azure_machine
    runner = runner_for(tmp_path)
    try:
        runner.apply("chat", manifest("chat", uri), 1)
        running(runner, "chat")
        state_file = next((tmp_path / "state" / "acme").glob("*/state.json"))
        planned = json.loads(state_file.read_text())["download"]
        assert dict(planned["versions"])["config.json"] == f"etag:{etags(azure)['config.json']}"
        # config.json is replaced (another ETag) and taken from disk: the next start
        # downloads the bytes pinned at apply, or nothing.
        azure.folder("private", "chat/", {"config.json": b"{}"})
        folder = download_files.snapshot_folder(
            tmp_path / "downloads", planned["repo"], planned["commit"]
        )
        (folder / "config.json").unlink()
        runner.restart("chat")
        status = failed(runner, "chat")
        assert f"config.json of {source} is no longer the version pinned at apply" in (
            status.reason
        )
        assert "Deploy again" in status.next_step
        assert not (folder / "config.json").exists()  # never the newer bytes in its place
    finally:
        runner.shutdown()


def test_machine_credentials_are_refused_naming_storage_credentials(azure_machine, tmp_path):
    _, uri, _ = azure_machine
    machine = Credentials("machine")
    refusals = [p.message for p in runner_for(tmp_path).check(manifest("chat", uri), None, machine)]
    assert len(refusals) == 1 and "storageCredentials" in refusals[0], refusals
