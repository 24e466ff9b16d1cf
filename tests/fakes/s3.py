"""A real S3 server for the tests: moto's server in its own process on 127.0.0.1 (a free port),
its request recorder on, so a test counts the reads the console made (their Range headers)
from the server's side. Buckets are made and filled with the real boto3 client.

    endpoint = s3_server.endpoint          # AWS_ENDPOINT_URL_S3 for the code under test
    s3_server.folder("models", "tiny/", {"config.json": b"...", ...}, public=True)
    s3_server.requests()                   # what the server was asked since the last reset
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from tests.fakes.child_server import ChildServer, free_port

ACCESS_KEY_ID = "AKIDSERVEDECKTEST"
SECRET_ACCESS_KEY = "servedeck-test-secret"
REGION = "us-east-1"
START_SECONDS = 60


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # /<bucket>/<key>, without the query
    query: str
    range: str | None
    signed: bool


class S3Server(ChildServer):
    def __init__(self, folder: Path) -> None:
        self.recording = folder / "requests.jsonl"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "MOTO_ENABLE_RECORDING": "1",
            "MOTO_RECORDER_FILEPATH": str(self.recording),
        }
        super().__init__(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            folder,
            "moto.log",
            env,
        )
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()  # noqa: S310
                break
            except OSError as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = folder / "moto.log"
                    raise RuntimeError(f"moto's server did not start; see {log}") from exc
                time.sleep(0.1)

    def _post(self, path: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}{path}", method="POST")
        urllib.request.urlopen(request, timeout=10).close()  # noqa: S310

    def reset(self) -> None:
        """Every bucket gone, and the recording emptied."""
        self._post("/moto-api/reset")
        self.forget()

    def forget(self) -> None:
        self._post("/moto-api/recorder/reset-recording")

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def folder(
        self,
        bucket: str,
        prefix: str,
        files: Mapping[str, bytes],
        *,
        public: bool = False,
        versioned: bool = False,
        region: str = REGION,
    ) -> dict[str, str]:
        """A bucket (made when new, in `region`) holding `files` under `prefix`; public:
        anyone may list and read it. The versionId of each file (versioned buckets), by
        name."""
        client = self.client()
        if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            where = {} if region == REGION else {"LocationConstraint": region}
            placed = {"CreateBucketConfiguration": where} if where else {}
            client.create_bucket(Bucket=bucket, **placed)
        if versioned:
            client.put_bucket_versioning(
                Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
            )
        if public:
            policy = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": "*",
                        "Action": ["s3:GetObject", "s3:ListBucket"],
                        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                    }
                ],
            }
            client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
        versions = {}
        for name, data in files.items():
            put = client.put_object(Bucket=bucket, Key=prefix + name, Body=data)
            versions[name] = put.get("VersionId", "")
        self.forget()  # the uploads are not the reads a test counts
        return versions

    def requests(self) -> list[Recorded]:
        found = []
        text = self.recording.read_text() if self.recording.exists() else ""
        for line in text.splitlines():
            entry = json.loads(line)
            headers = {k.lower(): v for k, v in entry["headers"].items()}
            url = entry["url"].split("://", 1)[-1]
            path = "/" + url.split("/", 1)[1] if "/" in url else "/"
            path, _, query = path.partition("?")
            found.append(
                Recorded(
                    entry["method"], path, query, headers.get("range"), "authorization" in headers
                )
            )
        return found


# ---- fixtures (registered by tests/conftest.py's pytest_plugins) ----


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The S3 server, emptied, and this process's boto3 pointed at it the way an operator
    points the console at a bucket's endpoint (AWS_ENDPOINT_URL_S3), with no credentials of
    this machine's in reach (no files, no instance metadata, no AWS_* keys)."""
    s3_server.reset()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    monkeypatch.setenv("AWS_REGION", REGION)
    for name in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # The reads' shared deadline is the product's (5 s); on a loaded test machine moto's
    # answers alone can take that long, and no test here is about time.
    from models_catalog import s3_reads

    monkeypatch.setattr(s3_reads, "TIME_BUDGET", 120.0)
    return s3_server
