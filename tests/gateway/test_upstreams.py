"""Where the gateway sends an application's requests, by backend, runtime and isolation."""

from types import SimpleNamespace

import pytest

from jobs.gateway.snapshot import upstream_of

PREDICTOR = "http://llama-predictor.models.svc.cluster.local"


@pytest.mark.parametrize(
    ("backend", "engine", "api", "isolation", "expected"),
    [
        ("local", "vllm", "OpenAI", "", "http://127.0.0.1:41001"),
        ("kubernetes", "vllm", "OpenAI", "Container", PREDICTOR + "/openai"),  # KServe's prefix
        ("kubernetes", "vllm", "", "", PREDICTOR + "/openai"),
        ("kubernetes", "parakeet", "OpenAI", "Container", PREDICTOR),
        # A virtual machine runs vLLM itself behind the predictor Service, at its own /v1.
        ("kubernetes", "vllm", "OpenAI", "VirtualMachine", PREDICTOR),
    ],
)
def test_upstream_of(backend, engine, api, isolation, expected):
    app = SimpleNamespace(name="llama", endpoint="http://127.0.0.1:41001/")
    assert upstream_of(app, backend, "models", engine, api, isolation) == expected


def test_no_endpoint_no_upstream():
    app = SimpleNamespace(name="llama", endpoint="")
    assert upstream_of(app, "kubernetes", "models", "vllm", "OpenAI", "VirtualMachine") == ""
