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

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from jobs.backends.local import download_files
from jobs.backends.local.runner import LocalRunner
from jobs.storage_access import ANONYMOUS, Credentials
from tests.fakes.cpu_runtime import install_fake
from tests.helpers import TINY_LLAMA_CONFIG
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, safetensors, seen
from tests.jobs.backends.local.test_local_hub_downloads import failed

URI = "gs://gcs-models/chat"
SOURCE = "gs://gcs-models/chat/"
WANTED = ["config.json", "model.safetensors", "tokenizer.json"]


def chat_files(tmp_path: Path) -> dict[str, bytes]:
    weights = tmp_path / "model.safetensors"
    safetensors(weights, {"embed": [100, 64], "layers": [2, 64, 64]})
    return {
        "config.json": json.dumps(TINY_LLAMA_CONFIG).encode(),
        "tokenizer.json": b'{"model": {}}',
        "model.safetensors": weights.read_bytes(),
        "onnx/model.onnx": b"\0" * 4096,  # a copy no runtime here reads
        "README.md": b"# chat\n",
    }


@pytest.fixture
def gcs_machine(cpu_machine, tmp_path, settings, gcs):
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
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


def runner_for(tmp_path, storage: Credentials | None = ANONYMOUS) -> LocalRunner:
    return LocalRunner(tmp_path / "state" / "acme", template=None, storage_for=lambda _: storage)


def test_a_folder_is_downloaded_at_its_pinned_generations_then_served_offline(
    gcs_machine, tmp_path
):
    gcs, generations = gcs_machine
    runner = runner_for(tmp_path)
    chat = manifest("chat", URI)
    assert runner.check(chat) == []
    try:
        runner.apply("chat", chat, 1)
        running(runner, "chat")
        files = chat_files(tmp_path)
        pins = [(n, len(files[n]), str(generations[n])) for n in WANTED]
        commit = download_files.folder_pin(pins)
        folder = download_files.snapshot_folder(tmp_path / "downloads", SOURCE, commit)
        assert folder.parent.parent.name.startswith("gs--gcs-models--")
        assert sorted(p.name for p in folder.iterdir()) == WANTED
        assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
        state_file = next((tmp_path / "state" / "acme").glob("*/state.json"))
        planned = json.loads(state_file.read_text())["download"]
        assert dict(planned["versions"]) == {n: str(generations[n]) for n in WANTED}
        given = seen(runner, "chat")
        assert (Path(given["cwd"]) / "chat").resolve() == folder.resolve()
        env = given["env"]
        assert env["HF_HUB_OFFLINE"] == "1"
        assert "STORAGE_EMULATOR_HOST" not in env and "SERVEDECK_GCS_ANONYMOUS" not in env
        log = "\n".join(runner.tail("chat", 100))
        assert f"servedeck download: {SOURCE} at {commit[:12]}: 3 files" in log
        assert f"servedeck download: {SOURCE} is complete in {folder}" in log
        assert downloads(gcs) == WANTED  # never the ONNX copy nor the README

        # A new generation uploaded since apply is not what this revision serves: a restart
        # finds its snapshot complete and fetches nothing.
        gcs.folder("gcs-models", "chat/", {"model.safetensors": b"x"})
        runner.restart("chat")
        running(runner, "chat")
        assert downloads(gcs) == []
    finally:
        runner.shutdown()


def test_an_object_replaced_since_apply_fails_the_replica_with_the_reason(gcs_machine, tmp_path):
    gcs, generations = gcs_machine
    runner = runner_for(tmp_path)
    try:
        runner.apply("chat", manifest("chat", URI), 1)
        running(runner, "chat")
        state_file = next((tmp_path / "state" / "acme").glob("*/state.json"))
        planned = json.loads(state_file.read_text())["download"]
        # config.json is replaced in the bucket (another generation, the pinned one gone) and
        # taken from disk: the next start downloads the generation pinned at apply, or nothing.
        replaced = gcs.folder("gcs-models", "chat/", {"config.json": b"{}"})
        assert replaced["config.json"] != generations["config.json"]
        folder = download_files.snapshot_folder(
            tmp_path / "downloads", planned["repo"], planned["commit"]
        )
        (folder / "config.json").unlink()
        runner.restart("chat")
        status = failed(runner, "chat")
        assert f"config.json of {SOURCE} is no longer the version pinned at apply" in (
            status.reason
        )
        assert "Deploy again" in status.next_step
        assert not (folder / "config.json").exists()  # never the newer bytes in its place
        assert not list(folder.glob(".*.part"))
    finally:
        runner.shutdown()


def test_an_access_key_pair_is_refused_naming_storage_credentials(gcs_machine, tmp_path):
    keys = Credentials("keys", "AKIAEXAMPLE", "not-a-secret")
    refusals = [p.message for p in runner_for(tmp_path).check(manifest("chat", URI), None, keys)]
    assert len(refusals) == 1 and "storageCredentials" in refusals[0], refusals
    assert "reads S3 only" in refusals[0]


def test_the_same_reserve_as_hf_models(gcs_machine, tmp_path, settings):
    settings.SERVEDECK_DOWNLOADS_RESERVE = "90%"  # more than this machine's disk has free
    refusals = [p.message for p in runner_for(tmp_path).check(manifest("chat", URI))]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"{SOURCE} needs ")
    assert "is kept free (SERVEDECK_DOWNLOADS_RESERVE)" in refusals[0]


def test_a_snapshot_no_application_uses_is_deleted(gcs_machine, tmp_path):
    runner = runner_for(tmp_path)
    try:
        runner.apply("chat", manifest("chat", URI), 1)
        running(runner, "chat")
        snapshots = list((tmp_path / "downloads").glob("gs--gcs-models--*/snapshots/*"))
        assert len(snapshots) == 1 and snapshots[0].is_dir()
        runner.delete("chat")
        assert not snapshots[0].exists()
        assert not list((tmp_path / "downloads").glob("gs--*"))
    finally:
        runner.shutdown()
