"""hf:// models on the local backend's CPU runtimes, without vLLM: the runtime chosen from the
repository's task and layout as the Hub lists it, the snapshot downloaded by the replica
itself (the real huggingface_hub client against the fake Hub serving a model folder from
disk) into the downloads folder, only the files its runtime reads, then the runtime started
on that folder offline and without the token. Refusals: a repository that does not fit the
free disk, one too large for the free memory (Check model's figures), a gated one the
profile has no token for (the replica fails with the reason and the next step).

The runtime is the stand-in of test_local_cpu_wiring (installed where scripts/cpu_runtimes.sh
puts transformers serve); tests/gateway/test_real_models_end_to_end.py runs the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.backends.local import download_files
from jobs.backends.local import runtimes as rt
from jobs.backends.local.runner import LocalRefused, LocalRunner
from jobs.backends.local.state import AppState, Replica, derive_status
from jobs.machine_catalog import MachineReadings, machine_catalog
from models_catalog.check import check_model
from tests.fakes.cpu_runtime import install_fake
from tests.fakes.hub import GOOD_TOKEN, FakeHub, disk_repo
from tests.helpers import TINY_LLAMA_CONFIG, wait_for
from tests.jobs.backends.local.test_local_cpu_wiring import manifest, running, safetensors, seen
from tests.manifest_text import local_manifest

REPO = "acme/tiny-chat"
HUB_CHAT = local_manifest("chat", f"hf://{REPO}")  # the shortest manifest of it
GIB = 2**30
# What the real all-MiniLM-L6-v2 repository lists: one model in many copies.
MINILM_FILES = [
    ".gitattributes", "1_Pooling/config.json", "README.md", "config.json",
    "config_sentence_transformers.json", "data_config.json", "model.safetensors",
    "modules.json", "onnx/model.onnx", "onnx/model_O1.onnx", "onnx/model_qint8_avx512.onnx",
    "openvino/openvino_model.bin", "openvino/openvino_model.xml", "pytorch_model.bin",
    "rust_model.ot", "sentence_bert_config.json", "special_tokens_map.json", "tf_model.h5",
    "tokenizer.json", "tokenizer_config.json", "train_script.py", "vocab.txt",
]  # fmt: skip


def test_the_files_fetched_per_layout_are_the_runtimes_own():
    assert download_files.files_to_download(MINILM_FILES, rt.HF) == [
        "1_Pooling/config.json", "config.json", "config_sentence_transformers.json",
        "model.safetensors", "modules.json", "sentence_bert_config.json",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
    ]  # fmt: skip
    sharded = ["config.json", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors", "model.safetensors.index.json",
               "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
               "pytorch_model.bin.index.json", "model.Q4_K_M.gguf", "tokenizer.json"]  # fmt: skip
    assert download_files.files_to_download(sharded, rt.HF) == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "tokenizer.json",
    ]  # fmt: skip
    only_bin = ["config.json", "pytorch_model.bin", "flax_model.msgpack", "vocab.json"]
    assert download_files.files_to_download(only_bin, rt.HF) == [
        "config.json",
        "pytorch_model.bin",
        "vocab.json",
    ]
    whisper = ["README.md", "config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    assert download_files.files_to_download(whisper, rt.CTRANSLATE2) == [
        "config.json", "model.bin", "tokenizer.json", "vocabulary.txt",
    ]  # fmt: skip
    # Only the checkpoint's own weights: not safetensors beside them, and where only the
    # index can tell, the shards it names.
    extra = [
        "config.json",
        "model.safetensors",
        "junk-1.safetensors",
        "model.safetensors.index.json",
    ]
    assert download_files.files_to_download(extra, rt.HF) == ["config.json", "model.safetensors"]
    shards = ["config.json", "a.safetensors", "b.safetensors", "junk.safetensors",
              "model.safetensors.index.json"]  # fmt: skip
    assert download_files.files_to_download(shards, rt.HF, ["a.safetensors", "b.safetensors"]) == [
        "a.safetensors", "b.safetensors", "config.json", "model.safetensors.index.json",
    ]  # fmt: skip
    complete = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model-00001-of-00009.safetensors", "config.json"]  # fmt: skip
    assert download_files.files_to_download(complete, rt.HF) == complete[-1:] + complete[:2]
    module = ["config.json", "model.safetensors", "2_Dense/model.safetensors",
              "2_Dense/huge.safetensors", "2_Dense/config.json"]  # fmt: skip
    assert download_files.files_to_download(module, rt.HF) == [
        "2_Dense/config.json", "2_Dense/model.safetensors", "config.json", "model.safetensors",
    ]  # fmt: skip
    # Names that are not plain file names never become allow patterns (fnmatch globs).
    odd = ["config.json", "model.safetensors", "*.safetensors", "../x.json", "a/b/c.json",
           "/etc/passwd", "[ab].json", "1_Pooling/../../config.json"]  # fmt: skip
    assert download_files.files_to_download(odd, rt.HF) == ["config.json", "model.safetensors"]
    assert download_files.files_to_download(MINILM_FILES, rt.GGUF) == []


@pytest.mark.parametrize(
    "repo",
    ["../etc", "acme/..", "acme/../../x", "acme/tiny/../..", "acme", "/acme/x", "acme/x/y",
     "acme/.hidden", "a" * 97 + "/x", "acme/x\0", "acme\\x/y"],
)  # fmt: skip
def test_a_snapshot_folder_never_leaves_the_downloads_folder(tmp_path, repo):
    with pytest.raises(ValueError):
        download_files.snapshot_folder(tmp_path, repo, "a" * 40)


def test_a_snapshot_folder_is_the_repo_at_its_commit(tmp_path):
    folder = download_files.snapshot_folder(
        tmp_path, "HuggingFaceTB/SmolLM2-135M-Instruct", "0" * 40
    )
    assert folder == tmp_path / "models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots" / (
        "0" * 40
    )
    for commit in ("main", "0" * 39, "../" + "0" * 37, "G" * 40):
        with pytest.raises(ValueError):
            download_files.snapshot_folder(tmp_path, "acme/x", commit)


def test_the_disk_and_memory_refusals_give_the_figures():
    assert download_files.disk_refusal(10, 10, "/d", "hf://a/b") is None
    said = download_files.disk_refusal(3 * GIB, GIB // 2, "/d", "hf://a/b")
    assert said.startswith("hf://a/b needs 3.0 GiB of disk in the downloads folder /d")
    assert "which has 512.0 MiB free" in said and "SERVEDECK_DOWNLOADS_DIR" in said
    assert rt.memory_refusal(GIB, GIB, "hf://a/b") is None
    why, step = rt.memory_refusal(2 * GIB, GIB + GIB // 2, "hf://a/b")
    assert why == (
        "hf://a/b needs 2.0 GiB of memory on this machine's CPU (weights, runtime and KV "
        "cache), and 1.5 GiB is free here."
    )
    assert "Stop other models" in step


def test_a_replica_downloading_reads_as_downloading():
    state = AppState("chat", 1, manifest("chat", f"hf://{REPO}"), "t", runtime="transformers")
    state.download = {"repo": REPO, "commit": "c" * 40}
    state.replicas = [Replica(0, 8000, 123, 1, "2026-01-01T00:00:00+00:00", ["x"])]
    status = derive_status(state, {0: False}, [], {0: "servedeck download: 1 MiB of 2 MiB (50%)"})
    assert status.phase == "Downloading"
    assert status.reason == (
        f"Replica 0 is downloading hf://{REPO} at cccccccccccc from the Hugging Face Hub: "
        "1 MiB of 2 MiB (50%)"
    )
    assert derive_status(state, {0: False}, [], {}).phase == "Loading"


# ---- the real client against the fake Hub, the stand-in runtime ----


def chat_repo(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    (folder / "tokenizer.json").write_text('{"model": {}}')
    safetensors(folder / "model.safetensors", {"embed": [100, 64], "layers": [2, 64, 64]})
    return folder


@pytest.fixture
def hub_machine(cpu_machine, tmp_path, settings, monkeypatch):
    """The CPU machine of test_local_cpu_wiring (no vLLM, the stand-in transformers runtime),
    a downloads folder, and a Hub serving a chat model from a folder on disk, with an ONNX
    copy it lists that no runtime here reads."""
    runtimes, _ = cpu_machine
    install_fake(runtimes)
    settings.SERVEDECK_DOWNLOADS_DIR = str(tmp_path / "downloads")
    repo = disk_repo(REPO, chat_repo(tmp_path / "hub" / REPO), blobs={"onnx/model.onnx": 4096})
    with FakeHub({REPO: repo}).serve() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def runner_for(tmp_path, token: str | None = None) -> LocalRunner:
    return LocalRunner(tmp_path / "state" / "acme", template=None, token_for=lambda _: token)


def failed(runner: LocalRunner, name: str):
    def phase():
        status = runner.observe(name)
        return status if status.phase == "Failed" else None

    return wait_for(phase, f"{name} is {runner.observe(name)}", 30)


def test_an_hf_model_is_downloaded_by_its_replica_then_served_offline(hub_machine, tmp_path):
    hub = hub_machine
    runner = runner_for(tmp_path, token=GOOD_TOKEN)
    chat = manifest("chat", f"hf://{REPO}")
    assert runner.check(chat, GOOD_TOKEN) == []
    hub.slow_files = {"model.safetensors": 2.0}  # the replica is seen downloading
    try:
        runner.apply("chat", chat, 1)
        downloading = wait_for(
            lambda: (s := runner.observe("chat")).phase == "Downloading" and s, "no download", 10
        )
        assert f"Replica 0 is downloading hf://{REPO} at " in downloading.reason
        hub.slow_files = {}
        status = running(runner, "chat")
        commit = hub.repos[REPO].sha
        folder = tmp_path / "downloads" / f"models--acme--tiny-chat/snapshots/{commit}"
        assert sorted(p.name for p in folder.iterdir()) == [
            "config.json", "model.safetensors", "tokenizer.json",
        ]  # fmt: skip
        given = seen(runner, "chat")
        assert (Path(given["cwd"]) / "chat").resolve() == folder.resolve()
        env = given["env"]
        assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
        assert "HF_TOKEN" not in env and env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"
        log = "\n".join(runner.tail("chat", 100))
        assert f"servedeck download: hf://{REPO} at {commit[:12]}: 3 files" in log
        assert f"servedeck download: hf://{REPO} is complete in {folder}" in log
        fetched = {r.path.split("/resolve/")[1] for r in hub.requests if "/resolve/" in r.path}
        assert not any("onnx" in path for path in fetched), fetched
        assert all(r.token for r in hub.requests)  # the launcher asked with the token

        # A restart finds the snapshot complete: nothing is fetched again.
        hub.reset_log()
        runner.restart("chat")
        assert running(runner, "chat").replicas[0].port == status.replicas[0].port
        assert not [r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    finally:
        runner.shutdown()


def test_a_repo_gated_since_apply_fails_the_replica_with_the_reason(hub_machine, tmp_path):
    hub = hub_machine
    runner = runner_for(tmp_path)
    chat = manifest("chat", f"hf://{REPO}")
    hub.repos[REPO].meta["gated"] = "manual"
    refusals = [p.message for p in runner.check(chat)]
    assert len(refusals) == 1 and "cannot be read" in refusals[0], refusals
    assert "Accept the model's terms" in refusals[0]
    with pytest.raises(LocalRefused):
        runner.apply("chat", chat, 1)

    # Read with the profile's token when applied; the token taken back (the operator no longer
    # allows its variable) by the time the replica starts and downloads.
    tokens = iter([GOOD_TOKEN])
    runner = LocalRunner(
        tmp_path / "state" / "acme", template=None, token_for=lambda _: next(tokens, None)
    )
    try:
        runner.apply("chat", chat, 1)
        status = failed(runner, "chat")
        assert f"{REPO} is gated, and the profile has no Hugging Face token" in status.reason
        assert status.next_step.startswith("Accept the model's terms at ")
        assert status.next_step.endswith("then Restart.")
        assert not (tmp_path / "downloads" / "models--acme--tiny-chat" / "snapshots").exists()
    finally:
        runner.shutdown()


def test_a_model_larger_than_the_machines_memory_is_not_downloaded(hub_machine, tmp_path):
    """A CPU runtime holds the weights in memory: files beyond it would only fill the disk."""
    hub = hub_machine
    hub.repos[REPO].meta["blobs"] = {"model.safetensors": 2**60}
    hub.repos[REPO]._files = None  # built again with the huge weights
    runner = runner_for(tmp_path)
    refusals = [p.message for p in runner.check(manifest("chat", f"hf://{REPO}"))]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"hf://{REPO} would download 1073741824.0 GiB (the configs")
    assert "more than this machine's" in refusals[0] and "Pick a smaller" in refusals[0]


def test_a_model_that_does_not_fit_the_free_disk_less_its_reserve_is_refused(
    hub_machine, tmp_path, settings
):
    settings.SERVEDECK_DOWNLOADS_RESERVE = "90%"  # more than this machine's disk has free
    runner = runner_for(tmp_path)
    refusals = [p.message for p in runner.check(manifest("chat", f"hf://{REPO}"))]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"hf://{REPO} needs ")
    assert "of disk in the downloads folder" in refusals[0] and "GiB free, of which " in refusals[0]
    assert "is kept free (SERVEDECK_DOWNLOADS_RESERVE)" in refusals[0]
    assert "lower SERVEDECK_DOWNLOADS_RESERVE, or set SERVEDECK_DOWNLOADS_DIR" in refusals[0]


def test_check_model_says_the_runtime_here_and_refuses_what_the_free_memory_cannot_hold(
    hub_machine,
):
    catalog = machine_catalog(MachineReadings(cores=2, memory_bytes=64 * GIB, gpus=()))
    here = check_model(f"hf://{REPO}", catalog=catalog, on_this_machine=True, free_memory=8 * GIB)
    assert here.can_serve, (here.verdict, here.next_step)
    assert here.runtime == "transformers"
    said = [w for w in here.warnings if w.startswith("On this machine it runs on transformers")]
    assert said and "downloads it into" in said[0], here.warnings
    # cpu_replica_bytes: (weights + 1 GiB runtime) x 4/3, in whole GiB: 2 GiB.
    tight = check_model(f"hf://{REPO}", catalog=catalog, on_this_machine=True, free_memory=GIB)
    assert not tight.can_serve
    assert tight.verdict == (
        f"hf://{REPO} needs 2.0 GiB of memory on this machine's CPU (weights, runtime and KV "
        "cache), and 1.0 GiB is free here."
    )
    elsewhere = check_model(f"hf://{REPO}", catalog=catalog, free_memory=GIB)
    assert elsewhere.can_serve and elsewhere.runtime == "vllm"  # another profile: not here


def test_the_launcher_refuses_a_plan_that_leaves_the_downloads_folder(tmp_path):
    import subprocess
    import sys

    from jobs.backends.local.download_plan import LAUNCHER

    plan = tmp_path / "download.json"
    bad = {"repo": "acme/../../etc", "commit": "a" * 40, "layout": "hf",
           "files": [["config.json", 1]], "downloads_dir": str(tmp_path / "d")}  # fmt: skip
    plan.write_text(json.dumps(bad))
    done = subprocess.run(
        [sys.executable, LAUNCHER, str(plan), "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 65, done
    assert "the download plan cannot be used" in done.stdout
    assert not (tmp_path / "d").exists()
    bad.update(repo="acme/x", files=[["../../outside.json", 1]])
    plan.write_text(json.dumps(bad))
    done = subprocess.run(
        [sys.executable, LAUNCHER, str(plan), "--", "/bin/true"], capture_output=True, text=True
    )
    assert done.returncode == 65 and "are not the layout's" in done.stdout


@pytest.fixture
def little_free_memory(tmp_path, monkeypatch):
    """This machine's memory as /proc/meminfo would say it with 1 GiB available."""
    from jobs.backends.local import machine_check

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemAvailable:    1048576 kB\n")
    monkeypatch.setattr(machine_check, "MEMINFO", meminfo)


def test_the_dry_run_names_the_runtime_here_and_refuses_the_same_memory(
    hub_machine, client, deployer, little_free_memory, settings
):
    from tests.helpers import bearer

    client.defaults.update(bearer(deployer))
    url = "/api/v1/applications?dryRun=true"
    answer = client.post(url, HUB_CHAT, content_type="application/yaml")
    assert answer.status_code == 400, answer.content
    problems = answer.json()["error"]["problems"]
    refused = [p for p in problems if p["level"] == "refusal"]
    assert len(refused) == 1, problems
    assert (refused[0]["path"], refused[0]["origin"]) == ("spec.source.model.uri", "check-model")
    assert refused[0]["message"].startswith(
        f"hf://{REPO} needs 2.0 GiB of memory on this machine's CPU (weights, runtime and KV "
        "cache), and 1.0 GiB is free here."
    )

    settings.SERVEDECK_DOWNLOADS_DIR = "/nonexistent-for-this-test/downloads"
    from jobs.backends.local import machine_check

    machine_check.MEMINFO.write_text("MemAvailable:   16777216 kB\n")
    body = client.post(url, HUB_CHAT, content_type="application/yaml").json()
    assert body["ok"] is True, body["refusals"]
    said = [w["message"] for w in body["warnings"] if "On this machine it runs on" in w["message"]]
    assert said and "transformers serve serves chat and completions" in said[0]


def test_a_gated_repo_is_read_with_the_profiles_token_only_where_the_operator_allowed_it(
    hub_machine, client, deployer, org, monkeypatch
):
    from jobs.models import Profile
    from tests.helpers import bearer

    hub_machine.repos[REPO].meta["gated"] = "manual"
    monkeypatch.setenv("HF_TOKEN_ACME", GOOD_TOKEN)
    Profile.objects.filter(organization=org, name="local").update(hf_token_ref="env/HF_TOKEN_ACME")
    client.defaults.update(bearer(deployer))
    url = "/api/v1/applications?dryRun=true"

    def refusals() -> list[str]:
        answer = client.post(url, HUB_CHAT, content_type="application/yaml")
        if answer.status_code == 200:
            return []
        return [p["message"] for p in answer.json()["error"]["problems"] if p["level"] == "refusal"]

    (said,) = refusals()  # the variable is not allowed for the organisation: no token is read
    assert said.startswith(f"{REPO} is gated, and the profile has no Hugging Face token")
    org.token_variables = ["HF_TOKEN_ACME"]
    org.save()
    hub_machine.reset_log()
    assert refusals() == []  # read with the token, by Check model and the local backend alike
    assert all(r.token for r in hub_machine.requests if REPO in r.path)
