"""What the tests of Check model on bucket folders (s3://, gs://, Azure Blob) share: a tiny
Llama's folder built by the fake Hub's builders, Check model called as the console calls it,
and the verdict of a folder read from its safetensors headers alone."""

from __future__ import annotations

import json

from jobs.machine_catalog import default_machine_catalog
from jobs.storage_access import ANONYMOUS, Credentials
from models_catalog.check import check_model
from tests.fakes.hub import SafetensorsFile, _index, _shard
from tests.fakes.hub_repos.layouts import llama
from tests.helpers import TINY_LLAMA_CONFIG

# The two-layer Llama of the other tests, in bfloat16 with a 512-token vocabulary.
TINY = {
    **TINY_LLAMA_CONFIG,
    "vocab_size": 512,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
TOKENIZER = {"model_max_length": 2048, "tokenizer_class": "GPT2Tokenizer"}
CATALOG = default_machine_catalog()


def tiny_files(config: dict | None = None, shards: int = 0) -> tuple[dict[str, bytes], int]:
    """A tiny Llama's folder, one file or `shards` shards with their index; and its
    parameter count."""
    config = config or TINY
    tensors = llama(config)
    files = {
        "config.json": json.dumps(config).encode(),
        "tokenizer_config.json": json.dumps(TOKENIZER).encode(),
        "tokenizer.json": b"{}",
    }
    if shards:
        pattern = "model-{index:05d}-of-{count:05d}.safetensors"
        parts = _shard(tensors, {"shards": shards, "pattern": pattern})
        built = {name: SafetensorsFile(part) for name, part in parts.items()}
        files["model.safetensors.index.json"] = _index(built)
    else:
        built = {"model.safetensors": SafetensorsFile(tensors)}
    files.update({name: st.read(0, st.size - 1) for name, st in built.items()})
    parameters = sum(sum(st.counts.values()) for st in built.values())
    return files, parameters


def check(uri: str, storage: Credentials = ANONYMOUS, **kw):
    kw.setdefault("format", "vLLM")
    return check_model(uri, catalog=CATALOG, storage=storage, **kw)


def assert_checked_from_headers_alone(result, parameters: int, reads: list, weights: bytes) -> None:
    """Checks that `result` is the tiny Llama's public folder (TINY) served by vLLM, its
    `parameters` counted from the safetensors header, and that `reads`, the server's reads of
    the weights' file `weights`, were two ranged reads: its 8 bytes of length, then its header,
    never the tensors' data."""
    assert result.can_serve, result.verdict
    assert (result.architecture, result.runtime, result.task) == (
        "LlamaForCausalLM",
        "vllm",
        "generate",
    )
    assert result.parameters == parameters
    assert result.weight_source == "headers"
    assert result.max_context_tokens == TINY["max_position_embeddings"]
    assert result.storage_private is False
    assert [r.range for r in reads][0] == "bytes=0-7"
    assert len(reads) == 2 and all(r.range for r in reads)
    header_end = int(reads[1].range.rsplit("-", 1)[1])
    assert header_end < len(weights) - 1000  # never the tensors' data
