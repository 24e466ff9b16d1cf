"""Reads from an S3 bucket for Check model, through the real boto3 client: a model folder's
listing, its JSON files and the byte ranges of its safetensors headers (never the weights),
within one time budget and byte bounds like the Hub's reads (hub.py), with plain errors.

The credentials are the profile's, resolved by jobs.storage_access at the time of use:
unsigned requests without any (a public bucket), an access key pair from allowed variables, or
this machine's chain where the operator allows it. The endpoint, region and TLS settings are
the operator's (AWS_ENDPOINT_URL_S3, AWS_REGION, ... on the console's host, as boto3 reads
them), never a member's.
"""

from __future__ import annotations

import threading

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from jobs.storage_access import Credentials
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

__all__ = [
    "MAX_OBJECTS",
    "Folder",
    "S3Reader",
    "StorageDenied",
    "StorageError",
    "StorageNotFound",
    "StorageUnavailable",
    "location_region",
]

# Seconds one check's S3 reads may take together; None: the Hub's (hub.default_budget, which
# SERVEDECK_HUB_TIME_BUDGET sets).
TIME_BUDGET: float | None = None
DEFAULT_REGION = "us-east-1"
_DENIED = {
    "AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
    "ExpiredToken", "InvalidToken", "AllAccessDisabled", "AccountProblem",
}  # fmt: skip
_MISSING = {"NoSuchBucket", "NoSuchKey", "404", "NotFound", "NoSuchVersion"}


class S3Reader(BucketReader):
    """One check's reads: a deadline shared by every call (the budget, from the reader's
    making), each call's read timeout cut to what is left of it, no retries."""

    scheme = "s3"

    def __init__(self, credentials: Credentials, seconds: float | None = None) -> None:
        if seconds is None:
            seconds = default_budget() if TIME_BUDGET is None else TIME_BUDGET
        super().__init__(seconds)
        self.credentials = credentials
        self._clients: dict[int, object] = {}
        self._lock = threading.Lock()

    def _client(self, anonymous: bool = False):
        left = self.left()
        whole = max(1, int(left))  # a client per whole second left: a few per check at most
        key = whole * 2 + anonymous
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._make(whole, anonymous)
            return self._clients[key]

    def _make(self, read_timeout: int, anonymous: bool):
        creds = self.credentials
        config = Config(
            connect_timeout=min(CONNECT_TIMEOUT, read_timeout),
            read_timeout=read_timeout,
            retries={"max_attempts": 1, "mode": "standard"},
            signature_version=UNSIGNED if anonymous or creds.anonymous else None,
            user_agent_extra="servedeck",
        )
        if creds.kind == "keys" and not anonymous:
            session = boto3.session.Session(
                aws_access_key_id=creds.access_key_id,
                aws_secret_access_key=creds.secret_access_key,
                aws_session_token=creds.session_token or None,
            )
        else:
            # machine: the SDK's own chain; anonymous: nothing is signed.
            session = boto3.session.Session()
        return session.client(
            "s3", region_name=session.region_name or DEFAULT_REGION, config=config
        )

    def _call(self, what: str, call, anonymous: bool = False):
        try:
            return call(self._client(anonymous))
        except ClientError as exc:
            raise self._translate(exc, what, anonymous) from None
        except NoCredentialsError:
            raise StorageDenied(
                f"{what}: this machine's credentials chain found no credentials", anonymous=False
            ) from None
        except BotoCoreError as exc:
            raise StorageUnavailable(f"{what}: {type(exc).__name__}") from None

    def _translate(self, exc: ClientError, what: str, anonymous: bool) -> StorageError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        unsigned = anonymous or self.credentials.anonymous
        if code in _DENIED or status in (401, 403):
            how = "to anonymous reads" if unsigned else "with the profile's credentials"
            return StorageDenied(f"{what}: access denied {how}", anonymous=unsigned)
        if code in _MISSING or status == 404:
            return StorageNotFound(f"{what}: not found ({code or status})")
        if status >= 500 or code in ("SlowDown", "ServiceUnavailable", "InternalError"):
            return StorageUnavailable(f"{what}: the storage failed ({code or status})")
        return StorageError(f"{what}: the storage answered {code or status}")

    def folder(self, bucket: str, key: str) -> Folder:
        """The objects under `key` taken as a folder (at most MAX_OBJECTS)."""
        prefix = key.rstrip("/") + "/"
        return folder_of("s3", bucket, prefix, self._listing(bucket, prefix))

    def _listing(self, bucket: str, prefix: str):
        """(key, size) of the objects under `prefix`, a page at a time."""
        token = None
        while True:
            args = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": LIST_PAGE}
            if token:
                args["ContinuationToken"] = token
            page = self._call(
                f"listing s3://{bucket}/{prefix}", lambda c, a=args: c.list_objects_v2(**a)
            )
            for item in page.get("Contents", []):
                yield str(item.get("Key", "")), int(item.get("Size", 0))
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                return

    def read_range(
        self, bucket: str, key: str, start: int, end: int, *, anonymous: bool = False
    ) -> bytes:
        """Bytes start..end (inclusive) of an object, never more than that however the
        storage answers."""
        wanted = end - start + 1
        where = f"s3://{bucket}/{key}"

        def get(client) -> bytes:
            answer = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}")
            body = answer["Body"]
            try:
                data = body.read(wanted)
            finally:
                body.close()
            return data

        return self._call(f"reading {where}", get, anonymous)

    def pins(self, folder: Folder, names: list[str]) -> list[tuple[str, int, str]]:
        """(name, size, version) of each file as it is now: its versionId, or `etag:<ETag>`
        where the bucket keeps no versions; what the local backend downloads at exactly."""
        found = []
        for name in names:
            key = folder.prefix + name

            def head(client, key=key) -> dict:
                answer = client.get_object(Bucket=folder.bucket, Key=key, Range="bytes=0-0")
                answer["Body"].close()
                return answer

            answer = self._call(f"reading s3://{folder.bucket}/{key}", head)
            version = answer.get("VersionId")
            if not version or version == "null":
                version = "etag:" + str(answer.get("ETag", "")).strip('"')
            size = next((f.size or 0 for f in folder.files if f.name == name), 0)
            found.append((name, size, str(version)))
        return found

    def bucket_region(self, bucket: str) -> str | None:
        """The bucket's region: GetBucketLocation with the reader's credentials, else the
        x-amz-bucket-region header S3 sends with HeadBucket's answer (a refusal's too, so a
        profile without credentials learns it); None when neither says, or no answer came in
        time."""
        try:
            answer = self._call(
                f"locating s3://{bucket}", lambda c: c.get_bucket_location(Bucket=bucket)
            )
            return location_region(answer.get("LocationConstraint"))
        except StorageError:
            pass
        try:
            answer = self._client().head_bucket(Bucket=bucket)
        except ClientError as exc:
            answer = exc.response
        except (BotoCoreError, StorageError):
            return None
        headers = (answer.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
        return headers.get("x-amz-bucket-region") or None


def location_region(constraint: str | None) -> str:
    """The region a GetBucketLocation answer names: none for us-east-1, and EU, its old name
    for eu-west-1."""
    if not constraint:
        return DEFAULT_REGION
    return "eu-west-1" if constraint == "EU" else constraint
