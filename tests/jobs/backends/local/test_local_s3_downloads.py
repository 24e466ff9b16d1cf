"""s3:// folders on the local backend's CPU runtimes: read with the profile's storage
credentials (moto's S3 server, the real boto3 client), each file the runtime reads pinned at
apply to its version, downloaded by the replica itself into the downloads folder under the same
reserve and reference rules as hf://, then the runtime started on that folder offline, without
the credentials. A private folder without credentials is refused naming storageCredentials; a
version gone since apply fails the replica with the reason and the next step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends.local import download_files
from jobs.backends.local.runner import LocalRunner
from jobs.storage_access import Credentials
from tests.fakes.cpu_runtime import install_fake
from tests.fakes.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.helpers import TINY_LLAMA_CONFIG
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, safetensors, seen
from tests.jobs.backends.local.test_local_hub_downloads import failed

KEYS = Credentials("keys", ACCESS_KEY_ID, SECRET_ACCESS_KEY)
URI = "s3://private-models/chat"
SOURCE = "s3://private-models/chat/"


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
def s3_machine(cpu_machine, tmp_path, settings, s3):
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    versions = s3.folder("private-models", "chat/", chat_files(tmp_path), versioned=True)
    return s3, versions


def downloads(s3) -> list:
    """Whole objects read from the folder (not its listing, not the ranged reads of a plan)."""
    return [
        r for r in s3.requests()
        if r.method == "GET" and r.range is None and r.path.startswith("/private-models/chat/")
    ]  # fmt: skip


def runner_for(tmp_path, storage: Credentials | None = KEYS) -> LocalRunner:
    return LocalRunner(tmp_path / "state" / "acme", template=None, storage_for=lambda _: storage)


def test_a_private_folder_is_downloaded_at_its_pinned_versions_then_served_offline(
    s3_machine, tmp_path
):
    s3, versions = s3_machine
    runner = runner_for(tmp_path)
    chat = manifest("chat", URI)
    refused = [p.message for p in runner.check(chat)]  # no credentials: anonymous
    assert len(refused) == 1 and "storageCredentials" in refused[0], refused
    assert runner.check(chat, storage=KEYS) == []
    try:
        runner.apply("chat", chat, 1)
        running(runner, "chat")
        wanted = ["config.json", "model.safetensors", "tokenizer.json"]
        sizes = {n: len(chat_files(tmp_path)[n]) for n in wanted}
        commit = download_files.folder_pin([(n, sizes[n], versions[n]) for n in wanted])
        folder = download_files.snapshot_folder(tmp_path / "downloads", SOURCE, commit)
        assert sorted(p.name for p in folder.iterdir()) == wanted
        assert (folder / "model.safetensors").read_bytes() == chat_files(tmp_path)[
            "model.safetensors"
        ]
        given = seen(runner, "chat")
        assert (Path(given["cwd"]) / "chat").resolve() == folder.resolve()
        env = given["env"]
        assert env["HF_HUB_OFFLINE"] == "1"
        assert not [k for k in env if k.startswith("AWS_") or k.startswith("SERVEDECK_S3")]
        assert SECRET_ACCESS_KEY not in json.dumps(env)
        log = "\n".join(runner.tail("chat", 100))
        assert f"servedeck download: {SOURCE} at {commit[:12]}: 3 files" in log
        assert f"servedeck download: {SOURCE} is complete in {folder}" in log
        assert SECRET_ACCESS_KEY not in log
        fetched = downloads(s3)
        assert sorted(r.path.rsplit("/", 1)[1] for r in fetched) == wanted  # never the ONNX
        assert all(r.signed and "versionId=" in r.query for r in fetched)

        # A new version uploaded since apply is not what this revision serves: a restart
        # finds its snapshot complete and fetches nothing.
        s3.client().put_object(Bucket="private-models", Key="chat/model.safetensors", Body=b"x")
        s3.forget()
        runner.restart("chat")
        running(runner, "chat")
        assert downloads(s3) == []
    finally:
        runner.shutdown()


def test_a_version_gone_since_apply_fails_the_replica_with_the_reason(s3_machine, tmp_path):
    s3, versions = s3_machine
    runner = runner_for(tmp_path)
    try:
        runner.apply("chat", manifest("chat", URI), 1)
        running(runner, "chat")
        state_file = next((tmp_path / "state" / "acme").glob("*/state.json"))
        planned = json.loads(state_file.read_text())["download"]
        assert dict(planned["versions"]) == {
            n: versions[n] for n in ("config.json", "model.safetensors", "tokenizer.json")
        }
        # The pinned version goes from the bucket (a newer one takes its place) and from disk:
        # the next start downloads the version pinned at apply, or nothing.
        client = s3.client()
        client.put_object(Bucket="private-models", Key="chat/config.json", Body=b"{}")
        client.delete_object(
            Bucket="private-models", Key="chat/config.json", VersionId=versions["config.json"]
        )
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
    finally:
        runner.shutdown()


def test_credentials_taken_back_stop_the_next_start(s3_machine, tmp_path):
    runner = runner_for(tmp_path, storage=None)
    chat = manifest("chat", URI)
    refusals = [p.message for p in runner.check(chat, storage=None)]
    assert refusals and "storageCredentials" in refusals[0]


def test_the_same_reserve_as_hf_models(s3_machine, tmp_path, settings):
    settings.SERVEDECK_DOWNLOADS_RESERVE = "90%"  # more than this machine's disk has free
    refusals = [p.message for p in runner_for(tmp_path).check(manifest("chat", URI), None, KEYS)]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"{SOURCE} needs ")
    assert "is kept free (SERVEDECK_DOWNLOADS_RESERVE)" in refusals[0]


def test_a_snapshot_no_application_uses_is_deleted(s3_machine, tmp_path):
    runner = runner_for(tmp_path)
    try:
        runner.apply("chat", manifest("chat", URI), 1)
        running(runner, "chat")
        snapshots = list((tmp_path / "downloads").glob("s3--private-models--*/snapshots/*"))
        assert len(snapshots) == 1 and snapshots[0].is_dir()
        runner.delete("chat")
        assert not snapshots[0].exists()
        assert not list((tmp_path / "downloads").glob("s3--*"))
    finally:
        runner.shutdown()
