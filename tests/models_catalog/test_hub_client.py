"""models_catalog.hub against the fake Hub, through the real huggingface_hub client: what it
reads, the errors it maps, its time budget, and its cache."""

import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from models_catalog import hub, hub_weights
from models_catalog.sizing import stored_bytes
from tests.fakes.hub import (
    GOOD_TOKEN,
    NO_ACCESS_TOKEN,
    FakeHub,
    InlineFile,
    closed_endpoint,
    load_repos,
    silent_endpoint,
)

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"


def resolve_requests(server, suffix: str) -> list:
    return [r for r in server.requests if "/resolve/" in r.path and r.path.endswith(suffix)]


# ---- what it reads ----


def test_model_info(hub_env):
    info = hub.model_info(LLAMA)
    assert info.id == LLAMA
    assert len(info.sha) == 40 and info.revision is None
    assert info.gated == "manual"
    assert info.pipeline_tag == "text-generation" and info.library == "transformers"
    assert "llama" in info.tags
    assert info.safetensors == {"BF16": 8_030_261_248}
    sizes = {file.name: file.size for file in info.siblings}
    assert sizes["original/consolidated.00.pth"] == 16_060_617_592
    assert info.size_of(["model-00001-of-00004.safetensors", "config.json"]) > 4 * 10**9
    assert isinstance(info.last_modified, datetime)


def test_model_info_at_a_pinned_commit(hub_env):
    sha = hub.model_info(QWEN).sha
    assert hub.model_info(QWEN, sha).sha == sha
    assert hub_env.requests[-1].path.startswith(f"/api/models/{QWEN}/revision/{sha}")


def test_read_json(hub_env):
    config = hub.read_json(QWEN, "config.json")
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert hub.read_json("BAAI/bge-m3", "modules.json")[1]["path"] == "1_Pooling"
    assert hub.read_json(QWEN, "modules.json") is None  # absent: None, not an error


def test_read_json_that_does_not_parse(hub_env):
    with pytest.raises(hub.BadFile, match="config.json of acme/broken-config is not valid JSON"):
        hub.read_json("acme/broken-config", "config.json")


def test_search(hub_env):
    found = hub.search("qwen", limit=3)
    assert [model.id for model in found] == [
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen3-30B-A3B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    ]  # most downloaded first
    first = found[0]
    assert first.downloads == 2_345_678 and first.likes == 812
    assert first.pipeline_tag == "text-generation" and first.gated is False
    assert isinstance(first.last_modified, datetime)
    gated = hub.search("Llama-3.1-8B")[0]
    assert gated.gated == "manual"
    assert hub.search("no-such-model-anywhere") == []


# ---- safetensors ----


@pytest.mark.parametrize(
    ("repo", "files", "dtypes"),
    [
        (LLAMA, 4, {"BF16": 8_030_261_248}),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", 2, {"I32": 822_033_408, "F16": 1_141_306_880}),
        ("openai/gpt-oss-20b", 3, {"BF16": 1_804_459_584, "U8": 10_152_345_600}),  # 0-based
        ("mistralai/Mistral-7B-Instruct-v0.3", 3, {"BF16": 7_248_023_552}),  # not consolidated
        ("openai/whisper-large-v3", 1, {"F16": 1_543_490_560}),
    ],
)
def test_headers_read_give_what_the_hub_summary_says(
    hub_env, headers_hub_server, repo, files, dtypes
):
    from_hub = hub_weights.safetensors_summary(repo, token=GOOD_TOKEN)
    headers_hub_server.reset_log()
    read = hub_weights.safetensors_summary(repo, token=GOOD_TOKEN, endpoint=headers_hub_server.url)
    assert (from_hub.source, read.source) == ("hub", "headers")
    assert from_hub.parameters_by_dtype == read.parameters_by_dtype == dtypes
    assert from_hub.tensor_bytes == read.tensor_bytes
    assert from_hub.file_bytes == read.file_bytes and len(read.files) == files
    # Two small range reads per file: the 8-byte length, then the header; never the weights.
    reads = resolve_requests(headers_hub_server, ".safetensors")
    assert len(reads) == 2 * files
    assert all(r.range and r.status == 206 for r in reads)
    headers = sum(len(headers_hub_server.repos[repo].files[name].head) for name in read.files)
    assert sum(r.bytes for r in reads) <= headers + 1024 * len(reads)  # + HTTP headers


def test_deepseek_v3_headers_across_163_shards(hub_env, headers_hub_server):
    read = hub_weights.safetensors_summary(
        "deepseek-ai/DeepSeek-V3", endpoint=headers_hub_server.url, every_header=True
    )
    assert len(read.files) == 163 and read.files[0] == "model-00001-of-000163.safetensors"
    assert read.parameters_by_dtype == {
        "BF16": 3_918_786_560, "F8_E4M3": 680_571_043_840, "F32": 41_555_600,
    }  # fmt: skip
    assert read.tensor_count > 90_000  # per-expert tensors and their FP8 scales
    assert read.tensor_bytes == 688_574_839_360


DEEPSEEK_BY_DTYPE = {"BF16": 3_918_786_560, "F8_E4M3": 680_571_043_840, "F32": 41_555_600}


def test_a_big_checkpoint_is_sized_from_its_index_and_two_headers(hub_env, headers_hub_server):
    """A mirror without the Hub's summary: DeepSeek-V3's 163 shards are sized from the
    index's total_size and two headers, not by reading every header."""
    headers_hub_server.reset_log()
    read = hub_weights.safetensors_summary(
        "deepseek-ai/DeepSeek-V3", endpoint=headers_hub_server.url
    )
    assert read.source == "index" and len(read.files) == 163
    assert read.tensor_bytes == 688_574_839_360  # total_size: exact
    shard_reads = resolve_requests(headers_hub_server, ".safetensors")
    assert len(shard_reads) == 4  # length and header of two shards
    index_reads = resolve_requests(headers_hub_server, ".index.json")
    assert len(index_reads) == 1 and index_reads[0].range  # its first bytes only
    assert headers_hub_server.bytes_sent() < 256 * 1024
    # The per-dtype split is an estimate: within 1% in all, the bulk's dtype right.
    total = sum(DEEPSEEK_BY_DTYPE.values())
    assert abs(sum(read.parameters_by_dtype.values()) - total) < total / 100
    assert max(read.parameters_by_dtype, key=read.parameters_by_dtype.get) == "F8_E4M3"
    assert set(read.parameters_by_dtype) == set(DEEPSEEK_BY_DTYPE)
    assert stored_bytes(read.parameters_by_dtype) == pytest.approx(read.tensor_bytes, rel=1e-9)


@pytest.mark.parametrize("metadata_first", [True, False], ids=["metadata-first", "metadata-last"])
def test_an_index_without_total_size_up_front_means_every_header_is_read(tmp_path, metadata_first):
    """Past eight shards the index's first bytes must give total_size; an index that puts
    its metadata after the weight map is not read whole: every header is read instead."""
    repo_dir = tmp_path / "acme" / "many-shards"
    repo_dir.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 1000}  # fmt: skip
    (repo_dir / "config.json").write_text(json.dumps(config))
    pattern = "model-{index:05d}-of-{count:05d}.safetensors"
    spec = {"layout": "llama", "shards": 10, "pattern": pattern}
    (repo_dir / "_repo.json").write_text(json.dumps({"weights": [spec]}))
    repos = load_repos(tmp_path)
    files = repos["acme/many-shards"].files
    index = json.loads(files[hub_weights.INDEX_FILE].data)
    if not metadata_first:
        index = {"weight_map": index["weight_map"], "metadata": index["metadata"]}
    files[hub_weights.INDEX_FILE] = InlineFile(json.dumps(index).encode())
    with FakeHub(repos, hub_summaries=False).serve() as server:
        read = hub_weights.safetensors_summary("acme/many-shards", endpoint=server.url)
        shard_reads = resolve_requests(server, ".safetensors")
    assert len(read.files) == 10
    assert read.tensor_bytes == index["metadata"]["total_size"]
    if metadata_first:
        assert (read.source, len(shard_reads)) == ("index", 4)
    else:
        assert (read.source, len(shard_reads)) == ("headers", 20)
        assert read.parameters_by_dtype == {"BF16": 202_048}


def test_no_safetensors(hub_env):
    assert hub_weights.safetensors_summary("BAAI/bge-m3") is None  # pytorch_model.bin only


def test_shards_named_only_by_the_index(tmp_path):
    """Shards the file names alone do not identify are found through the index."""
    repo_dir = tmp_path / "acme" / "odd-shards"
    repo_dir.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 1000}  # fmt: skip
    (repo_dir / "config.json").write_text(json.dumps(config))
    spec = {"layout": "llama", "shards": 3, "pattern": "weights-part{index}.safetensors"}
    (repo_dir / "_repo.json").write_text(json.dumps({"weights": [spec]}))
    with FakeHub(load_repos(tmp_path), hub_summaries=False).serve() as server:
        read = hub_weights.safetensors_summary("acme/odd-shards", endpoint=server.url)
    # 2 x 1000 x 64 (embeddings, head) + 2 layers x (q, o 64x64; k, v 32x64; 3 MLP 128x64;
    # 2 norms of 64) + the final norm: 128_000 + 2 x 36_992 + 64
    assert read.parameters_by_dtype == {"BF16": 202_048}
    assert read.files == tuple(f"weights-part{i}.safetensors" for i in (1, 2, 3))


def test_a_server_that_ignores_range_is_cut_off(hub_env, headers_hub_server):
    headers_hub_server.ignore_ranges = True
    headers_hub_server.reset_log()
    try:
        read = hub_weights.safetensors_summary(
            "openai/whisper-large-v3", endpoint=headers_hub_server.url, use_hub_summary=False
        )
    finally:
        headers_hub_server.ignore_ranges = False
    assert read.parameters_by_dtype == {"F16": 1_543_490_560}
    # the 3 GB file was not downloaded (what the server pushes into socket buffers before it sees
    # the client close varies with load, so the bound is generous)
    assert headers_hub_server.bytes_sent() < 64 * 2**20


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["model.safetensors", "model-00001-of-00002.safetensors"], ["model.safetensors"]),
        (["model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"],
         ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]),
        (["model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"],
         ["model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"]),
        (["model-00000-of-00001.safetensors", "model-00001-of-00001.safetensors"],
         ["model-00000-of-00001.safetensors", "model-00001-of-00001.safetensors"]),
        (["model-00001-of-00003.safetensors", "model.safetensors.index.json"], None),
        (["consolidated.safetensors", "params.json"], ["consolidated.safetensors"]),
        (["original/model.safetensors", "pytorch_model.bin"], []),
    ],
)  # fmt: skip
def test_safetensors_files(names, expected):
    assert hub_weights.safetensors_files(names) == expected


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["model.safetensors", "pytorch_model.bin"], ("safetensors", ["model.safetensors"])),
        (["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"],
         ("bin", ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"])),
        (["q4.gguf"], ("gguf", ["q4.gguf"])),
        (["onnx/model.onnx", "tf_model.h5"], (None, [])),
    ],
)  # fmt: skip
def test_weight_files(names, expected):
    assert hub_weights.weight_files(names) == expected


# ---- errors ----


@pytest.mark.parametrize(
    ("token", "error", "has_token"),
    [(None, hub.GatedRepo, False), (NO_ACCESS_TOKEN, hub.GatedRepo, True)],
)
def test_gated_repo(hub_env, token, error, has_token):
    assert hub.model_info(LLAMA, token=token).gated == "manual"  # metadata stays public
    with pytest.raises(error) as raised:
        hub.read_json(LLAMA, "config.json", token=token)
    assert raised.value.has_token is has_token
    assert raised.value.repo == LLAMA
    assert hub.read_json(LLAMA, "config.json", token=GOOD_TOKEN)["hidden_size"] == 4096


def test_a_token_saved_on_the_machine_is_never_used(hub_env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    with pytest.raises(hub.GatedRepo):
        hub.read_json(LLAMA, "config.json")
    assert not any(r.token for r in hub_env.requests)


def test_invalid_token(hub_env):
    with pytest.raises(hub.InvalidToken, match="rejected the Hugging Face token"):
        hub.model_info(QWEN, token="hf_not_a_real_token")


@pytest.mark.parametrize("token", [None, GOOD_TOKEN])
def test_repo_not_found(hub_env, token):
    with pytest.raises(hub.RepoNotFound) as raised:
        hub.model_info("acme/does-not-exist", token=token)
    assert raised.value.endpoint == hub_env.url


def test_revision_not_found(hub_env):
    with pytest.raises(hub.RevisionNotFound) as raised:
        hub.model_info(QWEN, "v9.9")
    assert raised.value.revision == "v9.9"
    with pytest.raises(hub.RevisionNotFound):
        hub.read_json(QWEN, "config.json", "v9.9")


# ---- time budget and endpoint ----


def test_a_hub_that_never_answers_fails_within_the_budget(monkeypatch):
    hub.clear_cache()
    with silent_endpoint() as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with hub.time_budget(0.5), pytest.raises(hub.HubUnavailable) as raised:
            hub.model_info(QWEN)
    assert raised.value.endpoint == endpoint
    assert "no answer within 0.5 s" in str(raised.value)


def test_the_default_budget_never_hangs(monkeypatch):
    hub.clear_cache()
    monkeypatch.setenv(hub.TIME_BUDGET_ENV, "1")  # the suite's own is longer (tests/conftest.py)
    said = "no answer within 1 s"
    with silent_endpoint() as endpoint, pytest.raises(hub.HubUnavailable, match=said):
        hub.search("llama", endpoint=endpoint)


def test_an_inner_budget_never_extends_an_outer_one():
    hub.clear_cache()
    # The outer 0.3 s deadline is the one that ends the call, not the inner 30 s one.
    with (
        silent_endpoint() as endpoint,
        hub.time_budget(0.3),
        hub.time_budget(30),
        pytest.raises(hub.HubUnavailable, match="no answer within 0.3 s"),
    ):
        hub.read_json(QWEN, "config.json", endpoint=endpoint)


def test_an_unreachable_hub(monkeypatch):
    hub.clear_cache()
    with closed_endpoint() as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with pytest.raises(hub.HubUnavailable, match="ConnectError") as raised:
            hub.search("llama")
    assert raised.value.endpoint == endpoint


def test_an_endpoint_that_is_not_a_hub():
    """HF_ENDPOINT pointing at some web server: a clear error, not a crash."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html>Welcome to nginx!</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    hub.clear_cache()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(hub.HubUnavailable, match="not the Hub's JSON"):
            hub.model_info(QWEN, endpoint=endpoint)
        with pytest.raises(hub.HubUnavailable, match="not the Hub's JSON"):
            hub.search("qwen", endpoint=endpoint)
    finally:
        server.shutdown()
        server.server_close()


def test_hf_endpoint_is_read_at_call_time(hub_env, monkeypatch):
    assert hub.model_info(QWEN).id == QWEN
    with closed_endpoint() as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint + "/")
        assert hub.endpoint_now() == endpoint
        with pytest.raises(hub.HubUnavailable):
            hub.model_info(QWEN)  # not answered from the other endpoint's cache
    monkeypatch.delenv("HF_ENDPOINT")
    assert hub.endpoint_now() == "https://huggingface.co"


# ---- cache ----


def test_answers_are_cached_per_endpoint_repo_revision_and_token(hub_env):
    hub.model_info(QWEN)
    hub.model_info(QWEN)
    assert len(hub_env.requests) == 1
    hub.model_info(QWEN, token=GOOD_TOKEN)  # another token may see another answer
    hub.model_info(QWEN, hub.model_info(QWEN).sha)  # another revision
    assert len(hub_env.requests) == 3
    hub.read_json(QWEN, "modules.json")
    hub.read_json(QWEN, "modules.json")  # "absent" is cached too
    assert len(hub_env.requests) == 4
    hub.clear_cache()
    hub.model_info(QWEN)
    assert len(hub_env.requests) == 5


def test_errors_are_not_cached(hub_env):
    for _ in range(2):
        with pytest.raises(hub.RepoNotFound):
            hub.model_info("acme/does-not-exist")
    assert len(hub_env.requests) == 2


def test_cache_entries_expire(hub_env, monkeypatch):
    monkeypatch.setattr(hub, "CACHE_SECONDS", 0.0)
    hub.model_info(QWEN)
    hub.model_info(QWEN)
    assert len(hub_env.requests) == 2


def test_the_cache_never_holds_a_token():
    key = hub.token_key(GOOD_TOKEN)
    assert GOOD_TOKEN not in key and len(key) == 16
    assert hub.token_key(None) == ""
