"""Reads from Azure Blob Storage for Check model, through the real azure-storage-blob client: a
model folder's listing and byte ranges of its files (JSON files whole within their bound,
safetensors headers; never the weights), within one time budget, no retries, with the same
plain errors as S3's (storage_reads.py).

A uri is `https://<account>.blob.core.windows.net/<container>/<path>`; the folder's "bucket"
here is `<account>.blob.core.windows.net/<container>`. The credentials are the profile's,
resolved by jobs.storage_access at the time of use: anonymous requests without any (a public
container), or `env/<PREFIX>` whose <PREFIX>_ACCESS_KEY_ID is the storage account's name and
<PREFIX>_SECRET_ACCESS_KEY its key (Shared Key). The endpoint is the operator's
(SERVEDECK_AZURE_BLOB_ENDPOINT, a URL with `{account}` in it, on the console's host; Azure's
otherwise), never a member's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from azure.core import exceptions as az
from azure.storage.blob import BlobServiceClient

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

# Seconds one check's Azure reads may take together; None: the Hub's (hub.default_budget).
TIME_BUDGET: float | None = None
ENDPOINT_SETTING = "SERVEDECK_AZURE_BLOB_ENDPOINT"
HOST_SUFFIX = ".blob.core.windows.net"


def split_url(text: str) -> tuple[str, str]:
    """(bucket, key) of an Azure Blob uri: `<account>.blob.core.windows.net/<container>` and
    the path in it (manifest.uri has checked its shape)."""
    rest = text.partition("://")[2].partition("?")[0]
    host, _, path = rest.partition("/")
    container, _, key = path.partition("/")
    return f"{host}/{container}", key


class AzureReader(BucketReader):
    """One check's reads of Azure Blob objects; each call's read timeout cut to what is left
    of the budget."""

    scheme = "https"

    def __init__(self, credentials: Credentials, seconds: float | None = None) -> None:
        if seconds is None:
            seconds = default_budget() if TIME_BUDGET is None else TIME_BUDGET
        super().__init__(seconds)
        self.credentials = credentials
        self._lock = threading.Lock()

    def locate(self, uri) -> tuple[str, str]:
        return split_url(uri.text)

    def _service(self, bucket: str, anonymous: bool) -> BlobServiceClient:
        account = bucket.partition(".")[0]
        template = os.environ.get(ENDPOINT_SETTING) or "https://{account}" + HOST_SUFFIX
        url = template.replace("{account}", account)
        unsigned = anonymous or self.credentials.anonymous
        if not unsigned and self.credentials.kind != "keys":
            raise StorageDenied(
                f"the profile's {CREDENTIALS_FIELD} is machine, which is not read for Azure "
                "Blob; use env/<PREFIX> whose <PREFIX>_ACCESS_KEY_ID is the storage account's "
                "name and <PREFIX>_SECRET_ACCESS_KEY its key",
                anonymous=False,
            )
        credential = None
        if not unsigned:
            credential = {
                "account_name": self.credentials.access_key_id,
                "account_key": self.credentials.secret_access_key,
            }
        left = self.left()
        return BlobServiceClient(
            url,
            credential=credential,
            connection_timeout=min(CONNECT_TIMEOUT, left),
            read_timeout=max(1, int(left)),
            retry_total=0,
        )

    def _translate(self, exc: Exception, what: str, anonymous: bool) -> StorageError:
        unsigned = anonymous or self.credentials.anonymous
        status = getattr(exc, "status_code", None) or 0
        if isinstance(exc, az.ClientAuthenticationError) or status in (401, 403):
            how = "to anonymous reads" if unsigned else "with the profile's credentials"
            return StorageDenied(f"{what}: access denied {how}", anonymous=unsigned)
        if unsigned and (isinstance(exc, az.ResourceNotFoundError) or status == 404):
            # Azure answers an anonymous read of a private container as if it did not exist.
            return StorageDenied(
                f"{what}: not found to anonymous reads (private, or no such container)",
                anonymous=True,
            )
        if isinstance(exc, az.ResourceNotFoundError) or status == 404:
            return StorageNotFound(f"{what}: not found (404)")
        if isinstance(exc, az.ServiceRequestError | az.ServiceResponseError) or status >= 500:
            return StorageUnavailable(f"{what}: {status or type(exc).__name__}")
        return StorageError(f"{what}: the storage answered {status or type(exc).__name__}")

    _ERRORS = (az.AzureError, ValueError)

    def folder(self, bucket: str, key: str) -> Folder:
        """The blobs under `key` taken as a folder (at most MAX_OBJECTS)."""
        prefix = key.rstrip("/") + "/"
        return folder_of("https", bucket, prefix, self._listing(bucket, prefix))

    def _listing(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        what = f"listing https://{bucket}/{prefix}"
        container = bucket.partition("/")[2]
        try:
            client = self._service(bucket, False).get_container_client(container)
            blobs = client.list_blobs(name_starts_with=prefix, results_per_page=LIST_PAGE)
            for count, blob in enumerate(blobs):
                if count > MAX_OBJECTS:
                    return
                yield str(blob.name), int(blob.size or 0)
        except self._ERRORS as exc:
            raise self._translate(exc, what, False) from None

    def read_range(
        self, bucket: str, key: str, start: int, end: int, *, anonymous: bool = False
    ) -> bytes:
        """Bytes start..end (inclusive) of a blob, never more than that however the storage
        answers."""
        wanted = end - start + 1
        container = bucket.partition("/")[2]
        try:
            blob = self._service(bucket, anonymous).get_blob_client(container, key)
            data = blob.download_blob(offset=start, length=wanted, max_concurrency=1).readall()
        except self._ERRORS as exc:
            raise self._translate(exc, f"reading https://{bucket}/{key}", anonymous) from None
        return bytes(data[:wanted])

    def pins(self, folder: Folder, names: list[str]) -> list[tuple[str, int, str]]:
        """(name, size, version) of each file as it is now: its version id where the account
        keeps versions, else `etag:<ETag>` (checked at download with If-Match); what the local
        backend downloads at exactly."""
        container = folder.bucket.partition("/")[2]
        found = []
        for name in names:
            key = folder.prefix + name
            try:
                blob = self._service(folder.bucket, False).get_blob_client(container, key)
                props = blob.get_blob_properties()
            except self._ERRORS as exc:
                raise self._translate(
                    exc, f"reading https://{folder.bucket}/{key}", False
                ) from None
            etag = str(props.etag).strip('"')
            version = getattr(props, "version_id", None) or f"etag:{etag}"
            found.append((name, int(props.size or 0), str(version)))
        return found
