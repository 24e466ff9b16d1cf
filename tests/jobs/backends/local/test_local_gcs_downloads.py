"""gs:// folders on the local backend's CPU runtimes, through the same download path as s3://
folders (test_local_s3_downloads.py): read at apply as Check model reads them (the GCS
emulator of tests/fakes/gcs.py, the real google-cloud-storage client), each file the runtime
reads pinned to its generation, downloaded by the replica itself into the downloads folder under
the same reserve and reference rules, then the runtime started on that folder offline, without
the storage settings. An object replaced since apply (another generation in its place) fails the
replica with the reason and the next step, never with the new bytes.

The emulator checks no credentials, so a private bucket's refusal is S3's test; an access key
pair, which reads S3 only, is refused here naming storageCredentials."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from jobs.storage_access import ANONYMOUS, Credentials
from tests.jobs.backends.local.bucket_downloads_support import (
    WANTED,
    assert_fails_without_its_pinned_config,
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

URI = "gs://gcs-models/chat"
SOURCE = "gs://gcs-models/chat/"


@pytest.fixture
def gcs_machine(cpu_machine, tmp_path, settings, gcs):
    downloading_machine(cpu_machine, tmp_path, settings)
    generations = gcs.folder("gcs-models", "chat/", chat_files(tmp_path))
    return gcs, generations


def downloads(gcs) -> list[str]:
    """The names of the whole objects downloaded from the folder (not its listing, not the
    metadata or ranged reads of a plan)."""
    return sorted(
        unquote(r.path).rsplit("/", 1)[1]
        for r in gcs.requests()
        if r.method == "GET" and "alt=media" in r.query and r.range is None
        and "gcs-models/o/chat/" in unquote(r.path)
    )  # fmt: skip


def test_a_folder_is_downloaded_at_its_pinned_generations_then_served_offline(
    gcs_machine, tmp_path
):
    gcs, generations = gcs_machine
    assert runner_for(tmp_path, ANONYMOUS).check(manifest("chat", URI)) == []
    with chat_running(tmp_path, URI, ANONYMOUS) as runner:
        pins = {n: str(generations[n]) for n in WANTED}
        served = assert_served_offline(runner, tmp_path, SOURCE, pins)
        assert served.folder.parent.parent.name.startswith("gs--gcs-models--")
        assert dict(planned_download(tmp_path)["versions"]) == pins
        env = served.env
        assert "STORAGE_EMULATOR_HOST" not in env and "SERVEDECK_GCS_ANONYMOUS" not in env
        assert downloads(gcs) == WANTED  # never the ONNX copy nor the README

        # A new generation uploaded since apply is not what this revision serves: a restart
        # finds its snapshot complete and fetches nothing.
        gcs.folder("gcs-models", "chat/", {"model.safetensors": b"x"})
        assert_restart_fetches_nothing(runner, lambda: downloads(gcs))


def test_an_object_replaced_since_apply_fails_the_replica_with_the_reason(gcs_machine, tmp_path):
    gcs, generations = gcs_machine
    with chat_running(tmp_path, URI, ANONYMOUS) as runner:
        planned = planned_download(tmp_path)
        # config.json is replaced in the bucket (another generation, the pinned one gone) and
        # taken from disk: the next start downloads the generation pinned at apply, or nothing.
        replaced = gcs.folder("gcs-models", "chat/", {"config.json": b"{}"})
        assert replaced["config.json"] != generations["config.json"]
        folder = assert_fails_without_its_pinned_config(runner, tmp_path, planned, SOURCE)
        assert not list(folder.glob(".*.part"))


def test_an_access_key_pair_is_refused_naming_storage_credentials(gcs_machine, tmp_path):
    keys = Credentials("keys", "AKIAEXAMPLE", "not-a-secret")
    runner = runner_for(tmp_path, ANONYMOUS)
    refusals = [p.message for p in runner.check(manifest("chat", URI), None, keys)]
    assert len(refusals) == 1 and "storageCredentials" in refusals[0], refusals
    assert "reads S3 only" in refusals[0]


def test_the_same_reserve_as_hf_models(gcs_machine, tmp_path, settings):
    settings.SERVEDECK_DOWNLOADS_RESERVE = "90%"  # more than this machine's disk has free
    refusals = [p.message for p in runner_for(tmp_path, ANONYMOUS).check(manifest("chat", URI))]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"{SOURCE} needs ")
    assert "is kept free (SERVEDECK_DOWNLOADS_RESERVE)" in refusals[0]


def test_a_snapshot_no_application_uses_is_deleted(gcs_machine, tmp_path):
    assert_unused_snapshot_deleted(tmp_path, URI, ANONYMOUS, "gs", "gcs-models")
