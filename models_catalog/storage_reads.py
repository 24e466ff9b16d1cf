"""What every bucket reader of Check model shares (S3 in s3_reads.py, Google Cloud Storage in
gcs_reads.py): the errors in plain words, a model folder and its bound, one time budget per
check, and the reads built on a reader's ranged read (a JSON file, whether anyone could read
the folder without credentials).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from jobs.storage_access import Credentials
from models_catalog.hub import MAX_JSON_BYTES, HubFile, default_budget

MAX_OBJECTS = 1000  # objects under one model's prefix: configs, tokenizer, shards
LIST_PAGE = 1000


class StorageError(Exception):
    """Something about the bucket that stops the answer; `str()` says it in plain words."""


class StorageDenied(StorageError):
    """The bucket refused the request: private to anonymous reads, or the keys lack access."""

    def __init__(self, message: str, *, anonymous: bool) -> None:
        super().__init__(message)
        self.anonymous = anonymous


class StorageNotFound(StorageError):
    """No such bucket, object or version."""


class StorageUnavailable(StorageError):
    """The storage did not answer in time, could not be reached, or failed on its side."""


@dataclass(frozen=True)
class Folder:
    """A model folder in a bucket: its files, named below the prefix, with sizes."""

    bucket: str
    prefix: str  # "" or ending in "/"
    files: tuple[HubFile, ...]
    scheme: str = "s3"

    @property
    def where(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}"

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.files]

    def has(self, name: str) -> bool:
        return any(f.name == name for f in self.files)


def folder_of(scheme: str, bucket: str, prefix: str, listed: Iterable[tuple[str, int]]) -> Folder:
    """The folder under `prefix` from a listing of (key, size), stopped past MAX_OBJECTS;
    "directory" placeholders (keys ending in /) left out."""
    where = f"{scheme}://{bucket}/{prefix}"
    files: list[HubFile] = []
    for key, size in listed:
        name = key[len(prefix) :] if key.startswith(prefix) else ""
        if name and not name.endswith("/"):
            files.append(HubFile(name, int(size or 0)))
        if len(files) > MAX_OBJECTS:
            raise StorageError(
                f"{where} holds more than {MAX_OBJECTS} objects; point the uri at the "
                "model's own folder"
            )
    if not files:
        raise StorageNotFound(f"{where}: no objects under it")
    return Folder(bucket, prefix, tuple(sorted(files, key=lambda f: f.name)), scheme)


class BucketReader:
    """One check's reads of one kind of storage: a deadline shared by every call (the budget,
    from the reader's making; None: the Hub's), and what is built on `read_range`."""

    scheme = ""
    credentials: Credentials  # the profile's, as jobs.storage_access resolved them

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = default_budget() if seconds is None else seconds
        self.deadline = time.monotonic() + self.seconds

    def left(self) -> float:
        """Seconds left of the budget; StorageUnavailable when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StorageUnavailable(f"no answer within {self.seconds:g} s")
        return left

    def locate(self, uri) -> tuple[str, str]:
        """(bucket, key) of a manifest.UriInfo: what `folder` is asked."""
        return uri.bucket or "", uri.key or ""

    def folder(self, bucket: str, key: str) -> Folder:
        raise NotImplementedError

    def read_range(
        self, bucket: str, key: str, start: int, end: int, *, anonymous: bool = False
    ) -> bytes:
        """Bytes start..end (inclusive) of an object, never more however the storage
        answers."""
        raise NotImplementedError

    def read_json(self, folder: Folder, name: str) -> dict | list | None:
        """A JSON file of the folder, or None when it has none."""
        if not folder.has(name):
            return None
        body = self.read_range(folder.bucket, folder.prefix + name, 0, MAX_JSON_BYTES - 1)
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:  # nested deeper than the parser goes
            raise StorageError(f"{name} of {folder.where} is not valid JSON ({exc})") from None

    def readable_anonymously(self, folder: Folder, name: str) -> bool:
        """Whether anyone may read `name` of the folder without credentials (one byte)."""
        try:
            self.read_range(folder.bucket, folder.prefix + name, 0, 0, anonymous=True)
        except StorageDenied:
            return False
        return True
