"""Check model's questions about a model folder in a bucket (S3 or Google Cloud Storage, through
the reader of its kind: storage_reads.BucketReader), answered by reading it as the Hub's reads
do: config.json and the tokenizer's files (whole, bounded), and the safetensors
headers by ranged reads (8 bytes, then the header; never the weights), a sharded checkpoint's
in parallel and a big one's from its index and a sample of them (hub_weights' rule)."""

from __future__ import annotations

import contextvars
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from models_catalog import hub, hub_weights
from models_catalog import safetensors_header as headers
from models_catalog.check_types import HubRequest
from models_catalog.storage_reads import BucketReader, Folder, StorageError


@dataclass(frozen=True)
class BucketRequest(HubRequest):
    """One s3:// or gs:// check: the same questions as an hf:// one, answered from the
    bucket."""

    reader: BucketReader | None = field(default=None, compare=False)
    folder: Folder | None = None

    @property
    def repo(self) -> str:
        assert self.folder is not None
        return self.folder.where

    def info(self) -> hub.HubModelInfo:
        """The folder as the Hub's model info: its files and sizes (no commit: a bucket's folder
        has none; the objects' versions or generations are what pin it)."""
        assert self.folder is not None
        files = self.folder.files
        return hub.HubModelInfo(self.repo, "", None, False, None, None, (), None, files, None, None)

    def read(self, filename: str, sha: str) -> dict | list | None:
        assert self.reader is not None and self.folder is not None
        return self.reader.read_json(self.folder, filename)

    def safetensors(self) -> hub_weights.SafetensorsSummary | None:
        assert self.reader is not None and self.folder is not None
        folder, names = self.folder, self.folder.names
        files, total = hub_weights.safetensors_files(names), None
        if files is None:
            files, total = hub_weights.index_contents(self.read(hub_weights.INDEX_FILE, ""))
            files = [name for name in files if folder.has(name)]
        if not files:
            return None
        sizes = self.info().size_of(files)
        if len(files) > hub_weights.READ_EVERY_HEADER_UP_TO and total:
            first, middle = self._headers([files[0], files[len(files) // 2]])
            counts = hub_weights.sampled_counts(
                _counted([first]).bytes_by_dtype, _counted([middle]).bytes_by_dtype, total
            )
            if counts is None:
                raise StorageError(
                    f"the safetensors index of {self.repo} gives a total_size its shards do "
                    "not add up to"
                )
            return hub_weights.SafetensorsSummary(counts, total, sizes, tuple(files), "index")
        found = _counted(self._headers(files))
        if not found.tensors:
            raise StorageError(f"the safetensors headers of {self.repo} name no tensor")
        return hub_weights.SafetensorsSummary(
            found.counts, found.tensor_bytes, sizes, tuple(files), "headers", found.tensors
        )

    def _headers(self, files: list[str]) -> list[tuple[str, object]]:
        """(file, header) of each file, read in parallel; the headers' lengths together held
        to safetensors_header.MAX_TOTAL_HEADER_BYTES before any is read past its 8 bytes."""
        budget, guard = headers.Tensors(), threading.Lock()
        with ThreadPoolExecutor(max_workers=min(hub_weights.HEADER_READERS, len(files))) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, self._header, n, budget, guard)
                for n in files
            ]
            return [(name, future.result()) for name, future in zip(files, futures, strict=True)]

    def _header(self, name: str, budget: headers.Tensors, guard: threading.Lock) -> object:
        assert self.reader is not None and self.folder is not None
        bucket, key = self.folder.bucket, self.folder.prefix + name
        (length,) = struct.unpack("<Q", _eight(self.reader.read_range(bucket, key, 0, 7), name))
        if not 0 < length <= hub_weights.MAX_HEADER_BYTES:
            raise StorageError(f"{name} does not start with a safetensors header")
        try:
            with guard:  # each header's length counts towards the model's before it is read
                budget.take_header_bytes(length, name)
            return headers.parse(self.reader.read_range(bucket, key, 8, 8 + length - 1), name)
        except headers.HeaderRefused as exc:
            raise StorageError(str(exc).rstrip(".")) from None
        except ValueError:
            raise StorageError(f"{name} has an unreadable safetensors header") from None


def _eight(data: bytes, name: str) -> bytes:
    if len(data) != 8:
        raise StorageError(f"{name} is too short to hold a safetensors header")
    return data


def _counted(read: list[tuple[str, object]]) -> headers.Tensors:
    try:
        return headers.count(read)
    except headers.HeaderRefused as exc:
        raise StorageError(str(exc).rstrip(".")) from None
