"""A Google Cloud Storage server for the tests: gcp-storage-emulator's JSON API (its storage and
request handler) on 127.0.0.1, in memory, in a thread of the test process, answering requests
in parallel, and recording each one (method, path, Range header) so a test counts the reads
the console made from the server's side. Buckets are made and filled with the real
google-cloud-storage client, which finds the server through STORAGE_EMULATOR_HOST.

    gcs.folder("models", "tiny/", {"config.json": b"...", ...})
    gcs.requests()                  # what the server was asked since the last reset

The emulator answers anonymous requests for everything (it checks no credentials), so a
private bucket's refusal is S3's test (moto), not this one's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from gcp_storage_emulator.server import RequestHandler
from gcp_storage_emulator.storage import Storage
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # the URL's path, without the query
    query: str
    range: str | None


class _Recording(RequestHandler):
    def __init__(self, record, *args, **kwargs):
        self._record = record
        super().__init__(*args, **kwargs)

    def _note(self) -> None:
        url = urlsplit(self.path)
        self._record(Recorded(self.command, url.path, url.query, self.headers.get("Range")))

    def do_GET(self):
        self._note()
        super().do_GET()

    def do_POST(self):
        self._note()
        super().do_POST()


class GCSServer:
    def __init__(self, data_dir: str) -> None:
        self.storage = Storage(use_memory_fs=True, data_dir=data_dir)
        self._recorded: list[Recorded] = []
        self._lock = threading.Lock()
        handler = partial(_Recording, self._note, self.storage)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def _note(self, recorded: Recorded) -> None:
        with self._lock:
            self._recorded.append(recorded)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self) -> None:
        """Every bucket gone, and the recording emptied."""
        self.storage.wipe()
        self.forget()

    def forget(self) -> None:
        with self._lock:
            self._recorded = []

    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._recorded)

    def client(self) -> storage.Client:
        return storage.Client(project="test", credentials=AnonymousCredentials())

    def folder(
        self, bucket: str, prefix: str, files: Mapping[str, bytes], *, location: str = "US-EAST1"
    ) -> dict[str, int]:
        """A bucket (made when new, in `location`) holding `files` under `prefix`; the
        generation of each file, by name."""
        client = self.client()
        found = client.lookup_bucket(bucket)
        if found is None:
            found = client.create_bucket(bucket, location=location)
            # The emulator makes every bucket in US; a real bucket is where it was asked to be.
            self.storage.buckets[bucket]["location"] = location
        generations = {}
        for name, data in files.items():
            blob = found.blob(prefix + name)
            blob.upload_from_string(data)
            generations[name] = int(blob.generation or 0)
        self.forget()  # the uploads are not the reads a test counts
        return generations


# ---- fixtures (registered by tests/conftest.py's pytest_plugins) ----


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    server = GCSServer(str(tmp_path_factory.mktemp("gcs")))
    yield server
    server.stop()


@pytest.fixture
def gcs(gcs_server, monkeypatch):
    """The GCS server, emptied, and this process's google-cloud-storage pointed at it the way
    an operator points the console at another endpoint (STORAGE_EMULATOR_HOST), with no
    Application Default Credentials of this machine's in reach."""
    gcs_server.reset()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    # The reads' shared deadline is the product's; on a loaded test machine the server's
    # answers alone can take that long, and no test here is about time.
    from models_catalog import gcs_reads

    monkeypatch.setattr(gcs_reads, "TIME_BUDGET", 120.0)
    return gcs_server
