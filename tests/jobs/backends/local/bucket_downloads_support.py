"""What the local backend's tests of bucket folders (s3://, gs://, Azure Blob) share: the chat
model's folder as uploaded, a CPU machine that downloads under tmp_path, a runner whose profile
gives one set of storage credentials, and the readings of what apply pinned, what the replica
downloaded and logged, and what the runtime was started on."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.local import download_files
from jobs.backends.local.runner import LocalRunner
from jobs.storage_access import Credentials
from tests.fakes.cpu_runtime import install_fake
from tests.helpers import TINY_LLAMA_CONFIG
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, safetensors, seen
from tests.jobs.backends.local.test_local_hub_downloads import failed

# The files of chat_files() the CPU runtimes read: all a replica downloads.
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


def downloading_machine(cpu_machine, tmp_path: Path, settings) -> None:
    """The fake CPU runtime installed, and the downloads folder under tmp_path."""
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")


def runner_for(tmp_path: Path, storage: Credentials | None) -> LocalRunner:
    """A runner whose profile gives every application `storage`."""
    return LocalRunner(tmp_path / "state" / "acme", template=None, storage_for=lambda _: storage)


@contextmanager
def chat_running(tmp_path: Path, uri: str, storage: Credentials | None) -> Iterator[LocalRunner]:
    """A runner (runner_for) with the chat application applied from `uri` and Running; shut
    down after."""
    runner = runner_for(tmp_path, storage)
    try:
        runner.apply("chat", manifest("chat", uri), 1)
        running(runner, "chat")
        yield runner
    finally:
        runner.shutdown()


def assert_private(tmp_path: Path, uri: str, keys: Credentials) -> None:
    """Checks that the folder is refused without credentials (anonymous), naming
    storageCredentials, and passes the checks with `keys`."""
    runner = runner_for(tmp_path, keys)
    chat = manifest("chat", uri)
    refused = [p.message for p in runner.check(chat)]  # no credentials: anonymous
    assert len(refused) == 1 and "storageCredentials" in refused[0], refused
    assert runner.check(chat, storage=keys) == []


def planned_download(tmp_path: Path) -> dict:
    """What apply planned to download, from the application's state.json: repo, commit and
    the version pinned for each file."""
    state_file = next((tmp_path / "state" / "acme").glob("*/state.json"))
    return json.loads(state_file.read_text())["download"]


@dataclass(frozen=True)
class Served:
    """What the replica of a downloaded folder was started on, and what it logged."""

    folder: Path  # the snapshot the runtime runs on
    env: dict[str, str]  # the runtime's environment
    log: str  # the replica's log


def assert_served_offline(
    runner: LocalRunner, tmp_path: Path, source: str, pins: dict[str, str]
) -> Served:
    """Checks that the running replica downloaded exactly WANTED, at `pins` (each file's
    version, by name), into its snapshot folder, said so in its log, and that its runtime
    runs on that folder offline."""
    files = chat_files(tmp_path)
    commit = download_files.folder_pin([(n, len(files[n]), pins[n]) for n in WANTED])
    folder = download_files.snapshot_folder(tmp_path / "downloads", source, commit)
    assert sorted(p.name for p in folder.iterdir()) == WANTED  # never the ONNX copy
    assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
    given = seen(runner, "chat")
    assert (Path(given["cwd"]) / "chat").resolve() == folder.resolve()
    env = given["env"]
    assert env["HF_HUB_OFFLINE"] == "1"
    log = "\n".join(runner.tail("chat", 100))
    assert f"servedeck download: {source} at {commit[:12]}: 3 files" in log
    assert f"servedeck download: {source} is complete in {folder}" in log
    return Served(folder, env, log)


def assert_restart_fetches_nothing(runner: LocalRunner, downloads: Callable[[], list]) -> None:
    """Checks that a restart finds the snapshot complete: Running again, and `downloads()`, the
    whole objects the server was asked for since, is empty."""
    runner.restart("chat")
    running(runner, "chat")
    assert downloads() == []


def assert_fails_without_its_pinned_config(
    runner: LocalRunner, tmp_path: Path, planned: dict, source: str
) -> Path:
    """With config.json replaced in the bucket since apply, takes it from disk too and checks
    that the next start fails the replica with the reason and the next step, never with the
    newer bytes. The snapshot folder."""
    folder = download_files.snapshot_folder(
        tmp_path / "downloads", planned["repo"], planned["commit"]
    )
    (folder / "config.json").unlink()
    runner.restart("chat")
    status = failed(runner, "chat")
    assert f"config.json of {source} is no longer the version pinned at apply" in status.reason
    assert "Deploy again" in status.next_step
    assert not (folder / "config.json").exists()  # never the newer bytes in its place
    return folder


def assert_unused_snapshot_deleted(
    tmp_path: Path, uri: str, storage: Credentials | None, scheme: str, bucket: str
) -> None:
    """Checks that the application's snapshot, in the downloads folder's `scheme--bucket--`
    folder, goes with the application."""
    downloads = tmp_path / "downloads"
    with chat_running(tmp_path, uri, storage) as runner:
        snapshots = list(downloads.glob(f"{scheme}--{bucket}--*/snapshots/*"))
        assert len(snapshots) == 1 and snapshots[0].is_dir()
        runner.delete("chat")
        assert not snapshots[0].exists()
        assert not list(downloads.glob(f"{scheme}--*"))
