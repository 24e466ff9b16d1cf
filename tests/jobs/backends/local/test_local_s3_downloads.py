"""s3:// folders on the local backend's CPU runtimes: read with the profile's storage
credentials (moto's S3 server, the real boto3 client), each file the runtime reads pinned at
apply to its version, downloaded by the replica itself into the downloads folder under the same
reserve and reference rules as hf://, then the runtime started on that folder offline, without
the credentials. A private folder without credentials is refused naming storageCredentials; a
version gone since apply fails the replica with the reason and the next step."""

from __future__ import annotations

import json

import pytest

from jobs.storage_access import Credentials
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.jobs.backends.local.bucket_downloads_support import (
    WANTED,
    assert_fails_without_its_pinned_config,
    assert_private,
    assert_restart_fetches_nothing,
    assert_served_offline,
    assert_unused_snapshot_deleted,
    chat_files,
    chat_running,
    downloading_machine,
    planned_download,
    runner_for,
)
from tests.jobs.backends.local.test_local_cpu_wiring import manifest

KEYS = Credentials("keys", ACCESS_KEY_ID, SECRET_ACCESS_KEY)
URI = "s3://private-models/chat"
SOURCE = "s3://private-models/chat/"


@pytest.fixture
def s3_machine(cpu_machine, tmp_path, settings, s3):
    downloading_machine(cpu_machine, tmp_path, settings)
    versions = s3.folder("private-models", "chat/", chat_files(tmp_path), versioned=True)
    return s3, versions


def downloads(s3) -> list:
    """Whole objects read from the folder (not its listing, not the ranged reads of a plan)."""
    return [
        r for r in s3.requests()
        if r.method == "GET" and r.range is None and r.path.startswith("/private-models/chat/")
    ]  # fmt: skip


def test_a_private_folder_is_downloaded_at_its_pinned_versions_then_served_offline(
    s3_machine, tmp_path
):
    s3, versions = s3_machine
    assert_private(tmp_path, URI, KEYS)
    with chat_running(tmp_path, URI, KEYS) as runner:
        served = assert_served_offline(runner, tmp_path, SOURCE, {n: versions[n] for n in WANTED})
        env = served.env
        assert not [k for k in env if k.startswith("AWS_") or k.startswith("SERVEDECK_S3")]
        assert SECRET_ACCESS_KEY not in json.dumps(env)
        assert SECRET_ACCESS_KEY not in served.log
        fetched = downloads(s3)
        assert sorted(r.path.rsplit("/", 1)[1] for r in fetched) == WANTED  # never the ONNX
        assert all(r.signed and "versionId=" in r.query for r in fetched)

        # A new version uploaded since apply is not what this revision serves: a restart
        # finds its snapshot complete and fetches nothing.
        s3.client().put_object(Bucket="private-models", Key="chat/model.safetensors", Body=b"x")
        s3.forget()
        assert_restart_fetches_nothing(runner, lambda: downloads(s3))


def test_a_version_gone_since_apply_fails_the_replica_with_the_reason(s3_machine, tmp_path):
    s3, versions = s3_machine
    with chat_running(tmp_path, URI, KEYS) as runner:
        planned = planned_download(tmp_path)
        assert dict(planned["versions"]) == {n: versions[n] for n in WANTED}
        # The pinned version goes from the bucket (a newer one takes its place) and from disk:
        # the next start downloads the version pinned at apply, or nothing.
        client = s3.client()
        client.put_object(Bucket="private-models", Key="chat/config.json", Body=b"{}")
        client.delete_object(
            Bucket="private-models", Key="chat/config.json", VersionId=versions["config.json"]
        )
        assert_fails_without_its_pinned_config(runner, tmp_path, planned, SOURCE)


def test_credentials_taken_back_stop_the_next_start(s3_machine, tmp_path):
    runner = runner_for(tmp_path, None)
    chat = manifest("chat", URI)
    refusals = [p.message for p in runner.check(chat, storage=None)]
    assert refusals and "storageCredentials" in refusals[0]


def test_the_same_reserve_as_hf_models(s3_machine, tmp_path, settings):
    settings.SERVEDECK_DOWNLOADS_RESERVE = "90%"  # more than this machine's disk has free
    runner = runner_for(tmp_path, KEYS)
    refusals = [p.message for p in runner.check(manifest("chat", URI), None, KEYS)]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"{SOURCE} needs ")
    assert "is kept free (SERVEDECK_DOWNLOADS_RESERVE)" in refusals[0]


def test_a_snapshot_no_application_uses_is_deleted(s3_machine, tmp_path):
    assert_unused_snapshot_deleted(tmp_path, URI, KEYS, "s3", "private-models")
