"""Fixtures for models_catalog tests: the fake Hugging Face Hub (real HTTP, real client)."""

import pytest

from models_catalog import hub
from tests.fakes.hub import FakeHub


@pytest.fixture(scope="session")
def fake_hub(fake_hub_server) -> str:
    """The fake Hub's URL."""
    return fake_hub_server.url


@pytest.fixture(scope="session")
def headers_hub_server():
    """A fake Hub whose model info carries no safetensors summary, as some Hub mirrors do:
    sizes must come from reading the safetensors headers."""
    with FakeHub(hub_summaries=False).serve() as server:
        yield server


@pytest.fixture
def hub_env(fake_hub, fake_hub_server, monkeypatch):
    """HF_ENDPOINT pointing at the fake Hub, no token from the machine, an empty cache and
    an empty request log."""
    monkeypatch.setenv("HF_ENDPOINT", fake_hub)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.clear_cache()
    fake_hub_server.reset_log()
    yield fake_hub_server
    hub.clear_cache()
