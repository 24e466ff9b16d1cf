"""Azure Blob Storage for the tests: Azurite's blob service (npm's `azurite`, installed into
tests/fakes/azurite by scripts/test.sh) in its own process on 127.0.0.1, in memory, with its
well-known development account. Containers are made and filled with the real
azure-storage-blob client; the console finds the server through SERVEDECK_AZURE_BLOB_ENDPOINT,
as an operator points it at another endpoint.

    azure.folder("models", "tiny/", {"config.json": b"...", ...}, public=True)
    uri = azure.uri("models", "tiny")   # https://devstoreaccount1.blob.core.windows.net/models/tiny
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient, PublicAccess

from tests.fakes.child_server import ChildServer, free_port

# Azurite's development account: documented, the same on every machine.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
BINARY = Path(__file__).parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"
START_SECONDS = 60


class AzuriteServer(ChildServer):
    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        super().__init__(
            [str(BINARY), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--inMemoryPersistence", "--skipApiVersionCheck", "--loose"],
            folder,
            "azurite.log",
        )  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}?comp=list", timeout=1).close()  # noqa: S310
                break
            except urllib.error.HTTPError:
                break  # it answers (an anonymous listing of the account is refused)
            except OSError as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Azurite did not start; see {folder}/azurite.log") from exc
                time.sleep(0.2)

    def client(self) -> BlobServiceClient:
        return BlobServiceClient(
            self.endpoint, credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}
        )

    def reset(self) -> None:
        """Every container gone."""
        client = self.client()
        for container in client.list_containers():
            client.delete_container(container.name)

    def uri(self, container: str, path: str) -> str:
        return f"https://{ACCOUNT}.blob.core.windows.net/{container}/{path}"

    def folder(
        self, container: str, prefix: str, files: Mapping[str, bytes], *, public: bool = False
    ) -> None:
        """A container (made when new; public: anyone may list and read its blobs) holding
        `files` under `prefix`."""
        client = self.client()
        with contextlib.suppress(ResourceExistsError):
            client.create_container(
                container, public_access=PublicAccess.CONTAINER if public else None
            )
        for name, data in files.items():
            client.get_blob_client(container, prefix + name).upload_blob(data, overwrite=True)


# ---- fixtures (registered by tests/conftest.py's pytest_plugins) ----


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory):
    if not BINARY.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"{BINARY} is missing: scripts/test.sh installs it (npm ci)")
        pytest.skip(f"Azurite is not installed at {BINARY}: run scripts/test.sh once (npm ci)")
    server = AzuriteServer(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture
def azure(azure_server, monkeypatch):
    """Azurite, emptied, and the console's Azure Blob reads pointed at it."""
    azure_server.reset()
    monkeypatch.setenv(
        "SERVEDECK_AZURE_BLOB_ENDPOINT", f"http://127.0.0.1:{azure_server.port}/{{account}}"
    )
    from models_catalog import azure_reads

    monkeypatch.setattr(azure_reads, "TIME_BUDGET", 120.0)
    return azure_server
