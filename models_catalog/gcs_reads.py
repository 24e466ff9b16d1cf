"""Reads from a Google Cloud Storage bucket for Check model, through the real google-cloud-storage
client: a model folder's listing, and byte ranges of its files (JSON files whole within their
bound, safetensors headers; never the weights), within one time budget, no retries, with the
same plain errors as S3's (storage_reads.py).

The credentials are the profile's, resolved by jobs.storage_access at the time of use:
anonymous requests without any (a public bucket), or this machine's Application Default
Credentials where the operator allows `machine`. An `env/<PREFIX>` key pair is S3's form and is
not used here. The endpoint is the operator's (STORAGE_EMULATOR_HOST on the console's host, as
the client reads it; Google's otherwise), never a member's.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import requests
from google.api_core import exceptions as api
from google.auth import exceptions as auth
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from jobs.storage_access import CREDENTIALS_FIELD, Credentials
from models_catalog.hub import CONNECT_TIMEOUT, default_budget
from models_catalog.storage_reads import (
    LIST_PAGE,
    MAX_OBJECTS,
    BucketReader,
    Folder,
    StorageDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
    folder_of,
)

# Seconds one check's GCS reads may take together; None: the Hub's (hub.default_budget).
TIME_BUDGET: float | None = None


class _Enough(Exception):
    """The ranged read has all the bytes it asked for: the download stops there."""


class _Bounded(io.RawIOBase):
    """Where a download writes: it keeps `wanted` bytes and stops the download past them,
    however much the storage sends."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, chunk) -> int:  # type: ignore[override]
        self.data += bytes(chunk)[: self.wanted - len(self.data)]
        if len(self.data) >= self.wanted:
            raise _Enough
        return len(chunk)


class GCSReader(BucketReader):
    """One check's reads of gs:// objects; each call's timeout cut to what is left of the
    budget."""

    scheme = "gs"

    def __init__(self, credentials: Credentials, seconds: float | None = None) -> None:
        if seconds is None:
            seconds = default_budget() if TIME_BUDGET is None else TIME_BUDGET
        super().__init__(seconds)
        self.credentials = credentials
        self._clients: dict[bool, storage.Client] = {}
        self._lock = threading.Lock()

    def _client(self, anonymous: bool) -> storage.Client:
        unsigned = anonymous or self.credentials.anonymous
        if not unsigned and self.credentials.kind != "machine":
            raise StorageDenied(
                f"the profile's {CREDENTIALS_FIELD} is an access key pair (env/<PREFIX>), "
                "which reads S3 only; for gs:// use machine (this machine's Application "
                "Default Credentials, where the operator allows it)",
                anonymous=False,
            )
        with self._lock:
            if unsigned not in self._clients:
                if unsigned:
                    made = storage.Client(project="<none>", credentials=AnonymousCredentials())
                else:
                    # The machine's Application Default Credentials; reads need no project.
                    made = storage.Client(project="<none>")
                self._clients[unsigned] = made
            return self._clients[unsigned]

    def _timeout(self) -> tuple[float, float]:
        left = self.left()
        return (min(CONNECT_TIMEOUT, left), left)

    def _translate(self, exc: Exception, what: str, anonymous: bool) -> StorageError:
        unsigned = anonymous or self.credentials.anonymous
        if isinstance(exc, api.Unauthorized | api.Forbidden):
            how = "to anonymous reads" if unsigned else "with the profile's credentials"
            return StorageDenied(f"{what}: access denied {how}", anonymous=unsigned)
        if isinstance(exc, auth.DefaultCredentialsError):
            return StorageDenied(
                f"{what}: this machine's Application Default Credentials were not found",
                anonymous=False,
            )
        if isinstance(exc, api.NotFound):
            return StorageNotFound(f"{what}: not found (404)")
        if isinstance(exc, api.ServerError | api.TooManyRequests):
            return StorageUnavailable(f"{what}: the storage failed ({exc.code})")
        if isinstance(exc, requests.RequestException | auth.TransportError):
            return StorageUnavailable(f"{what}: {type(exc).__name__}")
        if isinstance(exc, api.GoogleAPICallError):
            return StorageError(f"{what}: the storage answered {exc.code}")
        return StorageError(f"{what}: {type(exc).__name__}")

    _ERRORS = (
        api.GoogleAPICallError,
        auth.GoogleAuthError,
        requests.RequestException,
        ValueError,
    )

    def folder(self, bucket: str, key: str) -> Folder:
        """The objects under `key` taken as a folder (at most MAX_OBJECTS)."""
        prefix = key.rstrip("/") + "/"
        return folder_of("gs", bucket, prefix, self._listing(bucket, prefix))

    def _listing(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        what = f"listing gs://{bucket}/{prefix}"
        try:
            blobs = self._client(False).list_blobs(
                bucket,
                prefix=prefix,
                page_size=LIST_PAGE,
                max_results=MAX_OBJECTS + 1,
                timeout=self._timeout(),
                retry=None,
            )
            for blob in blobs:
                yield str(blob.name), int(blob.size or 0)
        except self._ERRORS as exc:
            raise self._translate(exc, what, False) from None

    def read_range(
        self, bucket: str, key: str, start: int, end: int, *, anonymous: bool = False
    ) -> bytes:
        """Bytes start..end (inclusive) of an object, never more than that however the
        storage answers."""
        wanted = end - start + 1
        sink = _Bounded(wanted)
        try:
            blob = self._client(anonymous).bucket(bucket).blob(key)
            blob.download_to_file(
                sink,
                start=start,
                end=end,
                raw_download=True,
                checksum=None,
                timeout=self._timeout(),
                retry=None,
            )
        except _Enough:
            pass
        except self._ERRORS as exc:
            raise self._translate(exc, f"reading gs://{bucket}/{key}", anonymous) from None
        return bytes(sink.data)

    def pins(self, folder: Folder, names: list[str]) -> list[tuple[str, int, str]]:
        """(name, size, generation) of each file as it is now: what the local backend
        downloads at exactly (a generation is the object's fixed bytes)."""
        found = []
        for name in names:
            key = folder.prefix + name
            try:
                blob = (
                    self._client(False)
                    .bucket(folder.bucket)
                    .get_blob(key, timeout=self._timeout(), retry=None)
                )
            except self._ERRORS as exc:
                raise self._translate(exc, f"reading gs://{folder.bucket}/{key}", False) from None
            if blob is None or not blob.generation:
                raise StorageNotFound(f"reading gs://{folder.bucket}/{key}: not found (404)")
            found.append((name, int(blob.size or 0), str(int(blob.generation))))
        return found

    def bucket_region(self, bucket: str) -> str | None:
        """The bucket's location (a region such as US-CENTRAL1, or a multi-region such as US);
        None when it cannot be read."""
        try:
            found = self._client(False).get_bucket(bucket, timeout=self._timeout(), retry=None)
        except (*self._ERRORS, StorageError):
            return None
        return found.location or None
