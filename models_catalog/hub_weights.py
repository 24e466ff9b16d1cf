"""A Hub repository's weights, read for Check model: which files vLLM loads, and their
parameters per dtype and bytes from safetensors headers only (never the weights).

The reads go through hub.py's client (its time budget, errors and cache); a sharded checkpoint's
headers are read in parallel, and a big one is sized from its index and a sample of them.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from huggingface_hub import hf_hub_url

import jobs.backends.local.download_files as download_files
from models_catalog import safetensors_header as headers
from models_catalog.hub import (
    BadFile,
    HubModelInfo,
    cached,
    endpoint_now,
    hub_call,
    model_info,
    read_bounded,
    read_json,
    token_key,
)
from models_catalog.sizing import DTYPE_BITS, stored_bytes

HEADER_READERS = 8  # parallel safetensors header reads of a sharded checkpoint
# Up to this many safetensors files, every header is read (one parallel round, exact counts);
# beyond it the index's total_size gives the bytes and two headers the dtypes.
READ_EVERY_HEADER_UP_TO = 8
INDEX_PREFIX_BYTES = 8 << 10  # where an index's "metadata" (with total_size) sits
MAX_HEADER_BYTES = 100 << 20  # safetensors refuses larger headers too


@dataclass(frozen=True)
class SafetensorsSummary:
    """A checkpoint's tensors, read from safetensors headers (never the weights)."""

    parameters_by_dtype: dict[str, int]
    tensor_bytes: int  # bytes of tensor data, as stored
    file_bytes: int | None  # the files' sizes on disk
    files: tuple[str, ...]
    # "hub": the Hub's summary of the headers; "headers": every header read here; "index":
    # the index's total_size, split by dtype as a sample of the headers splits it
    source: str
    tensor_count: int | None = None


_BIN = re.compile(r"pytorch_model(-\d+-of-\d+)?\.bin")
INDEX_FILE = "model.safetensors.index.json"


def safetensors_files(names: Sequence[str]) -> list[str] | None:
    """The safetensors files the checkpoint loads from, from the repo's file names alone
    (download_files.checkpoint_safetensors: the local backend downloads the same). None when only
    the index can tell; [] when there are none."""
    return download_files.checkpoint_safetensors(names)


def safetensors_summary(
    repo: str,
    revision: str | None = None,
    token: str | None = None,
    *,
    endpoint: str | None = None,
    use_hub_summary: bool = True,
    every_header: bool = False,
) -> SafetensorsSummary | None:
    """Parameters per dtype and weight bytes from safetensors headers only; None when the repo
    has no safetensors weights.

    The Hub's model info carries its own summary of the headers; with `use_hub_summary` (the
    default) that answers in one small request. Otherwise each file's 8-byte length and header
    are read with Range requests: a few KB per shard, never the weights. A checkpoint of more
    than READ_EVERY_HEADER_UP_TO files (DeepSeek-V3 has 163) is sized from its index's
    total_size and a sample of the headers instead, unless `every_header` asks for exact
    counts.
    """
    endpoint = endpoint_now(endpoint)
    key = ("safetensors", endpoint, repo, revision, use_hub_summary, every_header)
    key += (token_key(token),)

    def compute() -> SafetensorsSummary | None:
        info = model_info(repo, revision, token, endpoint=endpoint)
        with hub_call(endpoint, repo, token, revision):
            files, total_size = safetensors_files(info.file_names), None
            if files is None:
                files, total_size = index_files(repo, info.sha, token, endpoint)
            if not files:
                return None
            if use_hub_summary and info.safetensors:
                counts = info.safetensors
                return SafetensorsSummary(
                    counts, stored_bytes(counts), info.size_of(files), tuple(files), "hub"
                )
            if len(files) > READ_EVERY_HEADER_UP_TO and not every_header:
                if total_size is None and INDEX_FILE in info.file_names:
                    total_size = _index_total_size(repo, info.sha, token, endpoint)
                if total_size:
                    return _sample_headers(repo, info, files, total_size, token, endpoint)
            return _read_headers(repo, info, files, token, endpoint)

    return cached(key, compute)


def index_files(
    repo: str, sha: str, token: str | None, endpoint: str
) -> tuple[list[str], int | None]:
    """The files the index's weight_map names, and its metadata's total_size (or None)."""
    return index_contents(read_json(repo, INDEX_FILE, sha, token, endpoint=endpoint))


def index_contents(index: object) -> tuple[list[str], int | None]:
    """The files a safetensors index's weight_map names, and its metadata's total_size (or
    None), from the index as read, whatever its shape."""
    index = index if isinstance(index, dict) else {}
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    weight_map = index.get("weight_map")
    named = weight_map.values() if isinstance(weight_map, dict) else ()
    files = sorted({name for name in named if isinstance(name, str)})
    return files, _positive_int(total)


_TOTAL_SIZE = re.compile(rb'"total_size"\s*:\s*"?(\d{1,20})')


def _positive_int(value: object) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        number = int(value)  # type: ignore[call-overload]
        if number > 0 and not isinstance(value, bool):
            return number
    return None


def _index_total_size(repo: str, sha: str, token: str | None, endpoint: str) -> int | None:
    """The index's metadata.total_size from its first bytes: a big checkpoint's index names
    every tensor (9 MB for DeepSeek-V3), and the transformers writer puts "metadata" before
    "weight_map". None when the metadata is not there (the caller then reads every header)."""
    url = hf_hub_url(repo, INDEX_FILE, revision=sha, endpoint=endpoint)
    head = read_bounded(url, endpoint, token, 0, INDEX_PREFIX_BYTES - 1)
    before_weights = head.split(b'"weight_map"', 1)[0]
    match = _TOTAL_SIZE.search(before_weights)
    return _positive_int(match.group(1)) if match else None


def _parallel_headers(
    repo: str, info: HubModelInfo, files: Sequence[str], token: str | None, endpoint: str
) -> list[tuple[str, object]]:
    """(file, header) of each file, read in parallel; the headers' lengths together are held
    to safetensors_header.MAX_TOTAL_HEADER_BYTES before any is read past its first bytes."""
    budget, guard = headers.Tensors(), threading.Lock()

    def header(name: str) -> tuple[str, object]:
        url = hf_hub_url(repo, name, revision=info.sha, endpoint=endpoint)
        return name, _read_header(url, endpoint, token, name, budget, guard)

    with ThreadPoolExecutor(max_workers=min(HEADER_READERS, len(files))) as pool:
        # Each task runs in a copy of this context, so the time budget reaches the threads.
        futures = [pool.submit(contextvars.copy_context().run, header, name) for name in files]
        return [future.result() for future in futures]


def _sample_headers(
    repo: str,
    info: HubModelInfo,
    files: list[str],
    total_size: int,
    token: str | None,
    endpoint: str,
) -> SafetensorsSummary:
    """Parameters per dtype of a big checkpoint from the index's total_size (its tensor bytes)
    and two headers: the first file's, counted as it is (the embeddings sit there), and the
    middle file's, whose dtype mix stands for every other file (the repeated layers that make
    up the bulk). Parameters of a dtype = its estimated bytes / its bytes per parameter: exact
    in bytes, an estimate per dtype."""
    first, middle = _parallel_headers(
        repo, info, [files[0], files[len(files) // 2]], token, endpoint
    )
    first_bytes, middle_bytes = _bytes_by_dtype(first, endpoint), _bytes_by_dtype(middle, endpoint)
    counts = sampled_counts(first_bytes, middle_bytes, total_size)
    if counts is None:
        raise BadFile(
            f"the safetensors index of {repo} gives a total_size its shards do not add up to",
            endpoint=endpoint,
        )
    return SafetensorsSummary(counts, total_size, info.size_of(files), tuple(files), "index")


def sampled_counts(
    first_bytes: dict[str, int], middle_bytes: dict[str, int], total_size: int
) -> dict[str, int] | None:
    """Parameters per dtype of a checkpoint of `total_size` tensor bytes, from the tensor
    bytes per dtype of its first file and its middle one (see _sample_headers); None when the
    total is less than the first file holds, or the middle file holds nothing."""
    rest, middle_total = total_size - sum(first_bytes.values()), sum(middle_bytes.values())
    if rest < 0 or not middle_total:
        return None
    estimated = {
        dtype: first_bytes.get(dtype, 0) + rest * middle_bytes.get(dtype, 0) / middle_total
        for dtype in first_bytes.keys() | middle_bytes.keys()
    }
    return {dtype: round(size * 8 / DTYPE_BITS.get(dtype, 8)) for dtype, size in estimated.items()}


def _bytes_by_dtype(read: tuple[str, object], endpoint: str) -> dict[str, int]:
    """Tensor bytes per dtype of one file's header."""
    return _counted([read], endpoint).bytes_by_dtype


def _counted(read: list[tuple[str, object]], endpoint: str) -> headers.Tensors:
    """The headers counted (safetensors_header: the one reading, bounded in values); a header
    with values no checkpoint has is a BadFile naming the file and the tensor."""
    try:
        return headers.count(read)
    except headers.HeaderRefused as exc:
        raise BadFile(str(exc).rstrip("."), endpoint=endpoint) from None


def _read_headers(
    repo: str, info: HubModelInfo, files: list[str], token: str | None, endpoint: str
) -> SafetensorsSummary:
    found = _counted(_parallel_headers(repo, info, files, token, endpoint), endpoint)
    if not found.tensors:
        raise BadFile(f"the safetensors headers of {repo} name no tensor", endpoint=endpoint)
    return SafetensorsSummary(
        found.counts, found.tensor_bytes, info.size_of(files), tuple(files), "headers",
        found.tensors,
    )  # fmt: skip


def _read_header(
    url: str,
    endpoint: str,
    token: str | None,
    name: str,
    budget: headers.Tensors,
    guard: threading.Lock,
) -> object:
    (length,) = struct.unpack("<Q", read_bounded(url, endpoint, token, 0, 7))
    if not 0 < length <= MAX_HEADER_BYTES:
        raise BadFile(f"{name} does not start with a safetensors header", endpoint=endpoint)
    try:
        with guard:  # each header's length counts towards the model's before it is read
            budget.take_header_bytes(length, name)
        return headers.parse(read_bounded(url, endpoint, token, 8, 8 + length - 1), name)
    except headers.HeaderRefused as exc:
        raise BadFile(str(exc).rstrip("."), endpoint=endpoint) from None
    except ValueError as exc:
        raise BadFile(f"{name} has an unreadable safetensors header", endpoint=endpoint) from exc


def weight_files(names: Sequence[str]) -> tuple[str | None, list[str] | None]:
    """(format, files) of the weights vLLM would load: safetensors, else PyTorch .bin, else
    GGUF, else (None, []); files is None when only the safetensors index lists them."""
    safetensors = safetensors_files(names)
    if safetensors is None or safetensors:
        return "safetensors", safetensors
    bins = [name for name in names if _BIN.fullmatch(name)]
    if bins:
        return "bin", bins
    ggufs = [name for name in names if name.endswith(".gguf")]
    if ggufs:
        return "gguf", ggufs
    return None, []
