"""The downloads folder is shared by every organisation's hf:// replicas: members cannot fill
the console's disk through it. A free-space reserve stays free (SERVEDECK_DOWNLOADS_RESERVE,
named in the refusal); downloads under way reserve their bytes under one lock, so replicas
starting together account for each other; one download takes only the checkpoint's own
weights and never more than this machine's memory (test_local_hub_downloads.py beside this
file); and a snapshot no application of this console uses any more is deleted when an application
is deleted or moves to another one, whichever organisation's the others are.

The runtime is the stand-in of test_local_cpu_wiring; the Hub is the fake Hub serving model
folders from disk to the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.backends.local import download_files
from jobs.backends.local import download_space as space
from jobs.backends.local import processes as proc
from jobs.backends.local.download_plan import LAUNCHER
from jobs.backends.local.runner import LocalRunner
from tests.fakes.cpu_runtime import install_fake
from tests.fakes.hub import FakeHub, disk_repo
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running
from tests.jobs.backends.local.test_local_hub_downloads import chat_repo

GIB = 2**30
CHAT, OTHER = "acme/tiny-chat", "acme/other-chat"


@pytest.mark.parametrize(
    ("text", "filesystem", "expected"),
    [
        ("", 20 * GIB, 5 * GIB),  # the default: 5 GiB, or 10% of a larger file system
        (None, 200 * GIB, 20 * GIB),
        ("0", 200 * GIB, 0),
        ("20Gi", 200 * GIB, 20 * GIB),
        ("512 Mi", 200 * GIB, 512 * 2**20),
        ("1000000", 200 * GIB, 1_000_000),
        ("15%", 200 * GIB, 30 * GIB),
    ],
)
def test_the_reserve_is_an_amount_or_a_share_of_the_file_system(text, filesystem, expected):
    assert download_files.reserve_bytes(text, filesystem) == expected


@pytest.mark.parametrize("text", ["lots", "-1Gi", "20GB", "95%", "1.5Gi", "9" * 17])
def test_a_reserve_that_is_not_an_amount_is_refused_naming_the_setting(text):
    with pytest.raises(ValueError, match=r"SERVEDECK_DOWNLOADS_RESERVE=.* is not an amount"):
        download_files.reserve_bytes(text, GIB)


def test_the_disk_refusal_names_the_reserve_and_the_downloads_under_way():
    assert download_files.disk_refusal(GIB, 10 * GIB, "/d", "hf://a/b", 5 * GIB, 4 * GIB) is None
    said = download_files.disk_refusal(2 * GIB, 10 * GIB, "/d", "hf://a/b", 5 * GIB, 4 * GIB)
    assert said == (
        "hf://a/b needs 2.0 GiB of disk in the downloads folder /d (SERVEDECK_DOWNLOADS_DIR), "
        "which has 10.0 GiB free, of which 5.0 GiB is kept free (SERVEDECK_DOWNLOADS_RESERVE) "
        "and 4.0 GiB is held by downloads under way. Free disk there, wait for the other "
        "downloads to finish, lower SERVEDECK_DOWNLOADS_RESERVE, or set "
        "SERVEDECK_DOWNLOADS_DIR to a folder with more room."
    )
    assert download_files.download_size_refusal(2 * GIB, 8 * GIB, "hf://a/b") is None
    assert "more than this machine's 8.0 GiB of memory" in download_files.download_size_refusal(
        9 * GIB, 8 * GIB, "hf://a/b"
    )


def test_downloads_of_other_snapshots_reserve_the_disk_they_will_take(tmp_path):
    """Each check alone fits; together they would not: the second is refused while the first
    is under way, a second replica of the same snapshot is not counted twice, and the
    reservation of a process that has ended counts for nothing."""
    free = shutil.disk_usage(tmp_path).free
    share = free * 6 // 10  # two of them do not fit, whatever the other tests write meanwhile
    assert space.reserve(tmp_path, (CHAT, "a" * 40), share, 0, f"hf://{CHAT}") is None
    said = space.reserve(tmp_path, (OTHER, "b" * 40), share, 0, f"hf://{OTHER}")
    assert said is not None and said.startswith(f"hf://{OTHER} needs ")
    assert "is held by downloads under way" in said and "wait for the other downloads" in said
    assert space.reserve(tmp_path, (CHAT, "a" * 40), share, 0, f"hf://{CHAT}") is None
    space.release(tmp_path)
    assert space.live_reservations(tmp_path) == []
    assert space.reserve(tmp_path, (OTHER, "b" * 40), share, 0, f"hf://{OTHER}") is None
    space.release(tmp_path)

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    held_by_ended_process(tmp_path, int(ended.stdout), 2 * free)
    assert space.reserve(tmp_path, (OTHER, "b" * 40), share, 0, f"hf://{OTHER}") is None
    space.release(tmp_path)


def held_by_ended_process(downloads: Path, pid: int, size: int) -> None:
    folder = proc.private_dir(downloads / space.SPACE_DIR)
    entry = {"pid": pid, "start_ticks": 1, "boot_id": proc.boot_id(), "repo": "x/y",
             "commit": "c" * 40, "bytes": size}  # fmt: skip
    (folder / space.RESERVATIONS).write_text(json.dumps([entry]))


def held_by_this_process(downloads: Path, size: int) -> None:
    """A download of another snapshot under way, as the launcher of a replica records it."""
    folder = proc.private_dir(downloads / space.SPACE_DIR)
    ticks = proc.proc_stat(os.getpid()).start_ticks
    entry = {"pid": os.getpid(), "start_ticks": ticks, "boot_id": proc.boot_id(), "repo": "x/y",
             "commit": "c" * 40, "bytes": size}  # fmt: skip
    (folder / space.RESERVATIONS).write_text(json.dumps([entry]))


@pytest.fixture
def two_repos(cpu_machine, tmp_path, settings, monkeypatch):
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    repos = {name: disk_repo(name, chat_repo(tmp_path / "hub" / name)) for name in (CHAT, OTHER)}
    with FakeHub(repos).serve() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_a_download_under_way_is_counted_by_the_check_and_the_launcher(two_repos, tmp_path):
    downloads = tmp_path / "downloads"
    held_by_this_process(downloads, 2 * shutil.disk_usage(tmp_path).free)
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("chat", f"hf://{CHAT}"))]
    assert len(refusals) == 1 and "is held by downloads under way" in refusals[0], refusals

    # The launcher decides again, under the folder's lock, when the replica starts.
    commit = two_repos.repos[CHAT].sha
    plan = tmp_path / "download.json"
    plan.write_text(json.dumps({
        "repo": CHAT, "commit": commit, "layout": "hf", "downloads_dir": str(downloads),
        "files": [["config.json", 10], ["model.safetensors", 100], ["tokenizer.json", 10]],
        "runtime": "transformers", "reserve": 0, "max_bytes": 0,
    }))  # fmt: skip
    env = {**os.environ, "HF_ENDPOINT": two_repos.url}
    done = subprocess.run(
        [sys.executable, LAUNCHER, str(plan), "--", "/bin/true"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 73, done
    assert "is held by downloads under way" in done.stdout
    assert not download_files.snapshot_folder(downloads, CHAT, commit).exists()  # nothing fetched


def snapshots(downloads: Path) -> list[str]:
    return sorted(p.parent.parent.name + "@" + p.name[:7] for p in downloads.glob("*/snapshots/*"))


def test_a_snapshot_no_application_uses_is_deleted_whoever_used_it(two_repos, tmp_path):
    downloads = tmp_path / "downloads"
    acme = LocalRunner(tmp_path / "state" / "acme", template=None)
    globex = LocalRunner(tmp_path / "state" / "globex", template=None)  # another organisation
    chat_at = f"models--acme--tiny-chat@{two_repos.repos[CHAT].sha[:7]}"
    other_at = f"models--acme--other-chat@{two_repos.repos[OTHER].sha[:7]}"
    try:
        acme.apply("chat", manifest("chat", f"hf://{CHAT}"), 1)
        globex.apply("chat", manifest("chat", f"hf://{CHAT}"), 1)
        running(acme, "chat")
        running(globex, "chat")
        assert snapshots(downloads) == [chat_at]

        # acme's moves to another repository: globex's still uses the first snapshot.
        acme.apply("chat", manifest("chat", f"hf://{OTHER}"), 2)
        running(acme, "chat")
        assert snapshots(downloads) == [other_at, chat_at]
        # globex's goes: nothing uses the first any more.
        globex.delete("chat")
        assert snapshots(downloads) == [other_at]
        assert not (downloads / "models--acme--tiny-chat").exists()  # its blobs too
        assert space.live_reservations(downloads) == []  # the launchers released theirs

        # An application deployed before references were recorded keeps its snapshot by its
        # state alone.
        globex.apply("other", manifest("other", f"hf://{OTHER}"), 1)
        running(globex, "other")
        (downloads / space.SPACE_DIR / space.REFERENCES).write_text(
            json.dumps(
                [
                    {
                        "owner": str(acme._dir("chat").absolute()),
                        "repo": OTHER,
                        "commit": two_repos.repos[OTHER].sha,
                    }
                ]
            )  # fmt: skip
        )
        acme.delete("chat")
        assert snapshots(downloads) == [other_at]
        globex.delete("other")
        assert snapshots(downloads) == []
    finally:
        acme.shutdown()
        globex.shutdown()


def test_a_sharded_checkpoint_downloads_only_the_shards_its_index_names(tmp_path, monkeypatch):
    from models_catalog import hub
    from models_catalog.hub_facts import repo_facts
    from tests.jobs.backends.local.test_local_cpu_wiring import safetensors

    folder = chat_repo(tmp_path / "hub" / CHAT)
    (folder / "model.safetensors").unlink()
    for name in ("part-a.safetensors", "part-b.safetensors"):
        safetensors(folder / name, {name: [10, 64]})
    index = {"weight_map": {"embed": "part-a.safetensors", "layers": "part-b.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    repo = disk_repo(CHAT, folder, blobs={"extra.safetensors": 2**40})  # a copy nobody loads
    with FakeHub({CHAT: repo}).serve() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        hub.clear_cache()
        try:
            found = repo_facts(CHAT, None, None)
        finally:
            hub.clear_cache()
    assert [name for name, _ in found.files] == [
        "config.json", "model.safetensors.index.json", "part-a.safetensors",
        "part-b.safetensors", "tokenizer.json",
    ]  # fmt: skip
