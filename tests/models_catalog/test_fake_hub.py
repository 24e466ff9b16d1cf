"""The fake Hub itself: the real huggingface_hub client's own calls work against it, files
answer HEAD and Range like the Hub, and every request is logged with its bytes."""

import json
import struct
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, GatedRepoError

from tests.fakes.hub import GOOD_TOKEN, SafetensorsFile

SHARD = "model-00001-of-00004.safetensors"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_the_clients_own_safetensors_reader_agrees(fake_hub):
    """huggingface_hub's get_safetensors_metadata (a 100 KB range read per file) works too."""
    api = HfApi(endpoint=fake_hub, token=False)
    metadata = api.get_safetensors_metadata("BAAI/bge-reranker-v2-m3")
    assert metadata.parameter_count == {"F32": 567_755_777}
    assert not metadata.sharded


def test_hf_hub_download_and_file_listing(fake_hub, tmp_path):
    path = hf_hub_download(
        "Qwen/Qwen2.5-7B-Instruct", "config.json", endpoint=fake_hub, cache_dir=tmp_path,
        token=False,
    )  # fmt: skip
    assert json.loads(Path(path).read_text())["model_type"] == "qwen2"
    files = HfApi(endpoint=fake_hub, token=False).list_repo_files("Qwen/Qwen2.5-7B-Instruct")
    assert "model.safetensors.index.json" in files and "model-00004-of-00004.safetensors" in files
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("Qwen/Qwen2.5-7B-Instruct", "nope.json", endpoint=fake_hub,
                        cache_dir=tmp_path, token=False)  # fmt: skip


def test_gated_download_needs_a_granted_token(fake_hub, tmp_path):
    with pytest.raises(GatedRepoError):
        hf_hub_download(LLAMA, "config.json", endpoint=fake_hub, cache_dir=tmp_path, token=False)
    path = hf_hub_download(LLAMA, "config.json", endpoint=fake_hub, cache_dir=tmp_path,
                           token=GOOD_TOKEN)  # fmt: skip
    assert json.loads(Path(path).read_text())["num_key_value_heads"] == 8


def test_head_gives_the_true_size_without_a_body(fake_hub, fake_hub_server):
    fake_hub_server.reset_log()
    url = f"{fake_hub}/{LLAMA}/resolve/main/{SHARD}"
    response = httpx.head(url, headers={"Authorization": f"Bearer {GOOD_TOKEN}"})
    size = fake_hub_server.repos[LLAMA].files[SHARD].size
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == size > 4 * 10**9
    assert response.headers["x-repo-commit"] == fake_hub_server.repos[LLAMA].sha
    assert response.headers["x-linked-size"] == str(size)
    assert fake_hub_server.requests[-1].bytes < 1024  # headers only


def test_range_reads_return_a_real_safetensors_header(fake_hub, fake_hub_server):
    url = f"{fake_hub}/{LLAMA}/resolve/main/{SHARD}"
    auth = {"Authorization": f"Bearer {GOOD_TOKEN}"}
    first = httpx.get(url, headers={**auth, "Range": "bytes=0-7"})
    assert first.status_code == 206 and len(first.content) == 8
    (length,) = struct.unpack("<Q", first.content)
    header = httpx.get(url, headers={**auth, "Range": f"bytes=8-{7 + length}"})
    tensors = json.loads(header.content)
    assert tensors["__metadata__"] == {"format": "pt"}
    assert tensors["model.embed_tokens.weight"]["shape"] == [128256, 4096]
    size = fake_hub_server.repos[LLAMA].files[SHARD].size
    assert header.headers["content-range"] == f"bytes 8-{7 + length}/{size}"
    tail = httpx.get(url, headers={**auth, "Range": "bytes=-16"})
    assert tail.content == bytes(16)  # weights are zeros
    outside = httpx.get(url, headers={**auth, "Range": f"bytes={size}-"})
    assert outside.status_code == 416


def test_the_log_counts_bytes_and_never_keeps_tokens(fake_hub, fake_hub_server):
    fake_hub_server.reset_log()
    body = httpx.get(f"{fake_hub}/api/models/{LLAMA}", headers={"Authorization": "Bearer x"})
    assert body.status_code == 401  # an unknown token
    entry = fake_hub_server.requests[-1]
    assert entry.token is True and "x" not in entry.path
    assert entry.bytes > len(body.content)  # status line and headers too
    assert fake_hub_server.bytes_sent() == entry.bytes


def test_synthesized_file_layout():
    file = SafetensorsFile([("a", "BF16", [2, 3]), ("b", "F32", [4])])
    assert file.data_bytes == 2 * 3 * 2 + 4 * 4
    assert (len(file.head) - 8) % 8 == 0  # padded like safetensors
    assert file.size == len(file.head) + file.data_bytes
    assert file.read(0, file.size - 1)[: len(file.head)] == file.head
    assert file.counts == {"BF16": 6, "F32": 4}
