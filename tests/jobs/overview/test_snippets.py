""" "Call it from code": the task an application is called for, its base URL, the snippets (which
run: the Python one with the real `openai` client and the curl one against the stand-in model
server; the JavaScript one parses under node), and the application page that shows them."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.urls import reverse

from jobs.models import Application
from jobs.overview import snippets as s

STAND_IN = Path(__file__).parents[2] / "fakes" / "model_server.py"


def manifest(uri="hf://Qwen/Qwen3-0.6B", name="chat", fmt="vLLM", **model):
    return {
        "apiVersion": "servedeck.io/v1",
        "kind": "Application",
        "spec": {
            "name": name,
            "namespace": "default",
            "access": {"exposure": "Internal"},
            "source": {"type": "Model", "model": {"uri": uri, "format": fmt, **model}},
        },
    }


@pytest.mark.parametrize(
    ("doc", "task"),
    [
        (manifest(), s.CHAT),
        (manifest("hf://meta-llama/Llama-3.1-8B-Instruct"), s.CHAT),
        (manifest("hf://BAAI/bge-m3"), s.EMBEDDING),
        (manifest("hf://nomic-ai/nomic-embed-text-v1.5"), s.EMBEDDING),
        (manifest("hf://intfloat/multilingual-e5-large"), s.EMBEDDING),
        (manifest("hf://BAAI/bge-reranker-v2-m3"), s.RERANK),  # rerank before the bge- hint
        (manifest("hf://openai/whisper-large-v3"), s.SPEECH),
        (manifest("hf://nvidia/parakeet-tdt-0.6b-v3", runtime={"engine": "parakeet"}), s.SPEECH),
        (manifest("pvc://models/my-model", engine={"extraArgs": ["--task embed"]}), s.EMBEDDING),
        (manifest("pvc://models/m", engine={"extraArgs": ["--runner=pooling"]}), s.EMBEDDING),
        (manifest("pvc://models/m", engine={"extraArgs": ["--convert", "classify"]}), s.RERANK),
        (manifest("pvc://models/m", engine={"extraArgs": ["--max-num-batched-tokens 8"]}), s.CHAT),
        # an engine argument outweighs the name
        (manifest("hf://BAAI/bge-m3", engine={"extraArgs": ["--task", "score"]}), s.RERANK),
        # not the OpenAI API: no snippets
        (manifest("s3://bucket/model", fmt="SKLearn"), None),
        (manifest(serving={"apiFormat": "V2"}), None),
        (
            {
                "spec": {
                    "name": "raw",
                    "source": {
                        "type": "YAML",
                        "inferenceService": {
                            "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}}}}
                        },
                    },
                }
            },
            s.CHAT,
        ),
        ({}, None),
        ("not a manifest", None),
    ],
)
def test_the_task_an_application_is_called_for(doc, task):
    assert s.application_task(doc) == task


@pytest.mark.parametrize(
    ("access", "origin", "expected"),
    [
        ({"exposure": "Internal"}, "http://localhost:8000/", "http://localhost:8000/v1"),
        ({}, "https://console.example.com", "https://console.example.com/v1"),
        (
            {"exposure": "Domain", "domain": "models.example.com", "accessPolicy": "p"},
            "http://localhost:8000/",
            "https://chat.models.example.com/v1",
        ),
        # Domain without a domain (a refused manifest): the console's own gateway
        ({"exposure": "Domain"}, "http://localhost:8000/", "http://localhost:8000/v1"),
    ],
)
def test_base_url(access, origin, expected):
    doc = manifest()
    doc["spec"]["access"] = access
    assert s.base_url(doc, origin) == expected


URL = "http://localhost:8000/v1"


@pytest.mark.parametrize(
    ("task", "python", "curl", "javascript"),
    [
        (
            s.CHAT,
            "client.chat.completions.create(",
            "curl http://localhost:8000/v1/chat/completions",
            "client.chat.completions.create({",
        ),
        (
            s.EMBEDDING,
            "client.embeddings.create(",
            "curl http://localhost:8000/v1/embeddings",
            "client.embeddings.create({",
        ),
        (s.RERANK, 'client.post(\n    "/rerank"', "curl http://localhost:8000/v1/rerank", "fetch("),
        (
            s.SPEECH,
            "client.audio.transcriptions.create(",
            "curl http://localhost:8000/v1/audio/transcriptions",
            "client.audio.transcriptions.create({",
        ),
    ],
)
def test_each_task_calls_its_route(task, python, curl, javascript):
    got = {snippet.language: snippet.code for snippet in s.call_snippets(task, URL, "m-1")}
    assert list(got) == ["python", "curl", "javascript"]
    assert python in got["python"] and curl in got["curl"] and javascript in got["javascript"]
    for code in got.values():
        assert '"m-1"' in code or "model=m-1" in code
        assert "SERVEDECK_API_KEY" in code
    assert 'base_url="http://localhost:8000/v1"' in got["python"]
    assert '"Authorization: Bearer $SERVEDECK_API_KEY"' in got["curl"]


def test_an_unknown_task_is_refused_by_name():
    with pytest.raises(ValueError, match="task 'predict' has no snippets; accepts chat"):
        s.call_snippets("predict", URL, "m")


def test_odd_urls_stay_quoted_in_every_language():
    url = "https://it's.example.com/v1"
    for task in s.TASK_TITLES:
        for snippet in s.call_snippets(task, url, "m"):
            if snippet.language == "curl":
                assert "'https://it'\"'\"'s.example.com/v1" in snippet.code
            else:
                assert "\"https://it's.example.com/v1" in snippet.code


@pytest.mark.parametrize("task", list(s.TASK_TITLES))
def test_python_snippets_compile(task):
    code = s.call_snippets(task, URL, "m")[0].code
    compile(code, f"<{task} snippet>", "exec")


@pytest.mark.parametrize("task", list(s.TASK_TITLES))
def test_curl_snippets_are_valid_shell(task):
    code = s.call_snippets(task, URL, "m")[1].code
    result = subprocess.run(["bash", "-n"], input=code, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (Debian's nodejs) on PATH")
@pytest.mark.parametrize("task", list(s.TASK_TITLES))
def test_javascript_snippets_parse_as_modules(task, tmp_path):
    script = tmp_path / f"{task}.mjs"
    script.write_text(s.call_snippets(task, URL, "m")[2].code)
    result = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --- the snippets run against an OpenAI-compatible server ----------------------------------

SECRET = "sdk_snippet-test-key"


@pytest.fixture(scope="module")
def model_server():
    """The stand-in model server, requiring the key the snippets read from the environment."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            str(STAND_IN),
            "--port",
            str(port),
            "--served-model-name",
            "m-1",
            "--api-key",
            SECRET,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):
            try:
                httpx.get(url + "/models", timeout=0.5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_snippet(argv, code, url_env):
    env = dict(os.environ, SERVEDECK_API_KEY=url_env)
    return subprocess.run(argv, input=code, text=True, capture_output=True, env=env, timeout=60)


@pytest.mark.parametrize("task", [s.CHAT, s.EMBEDDING])
def test_the_python_snippet_runs_with_the_openai_client(model_server, task):
    code = s.call_snippets(task, model_server, "m-1")[0].code
    result = run_snippet([sys.executable, "-"], code, SECRET)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    refused = run_snippet([sys.executable, "-"], code, "sdk_wrong")
    assert refused.returncode != 0 and "401" in refused.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl on PATH")
@pytest.mark.parametrize(("task", "answer"), [(s.CHAT, '"choices"'), (s.EMBEDDING, '"embedding"')])
def test_the_curl_snippet_runs(model_server, task, answer):
    code = s.call_snippets(task, model_server, "m-1")[1].code
    result = run_snippet(["bash", "-s"], code, SECRET)
    assert result.returncode == 0, result.stderr
    assert answer in result.stdout


# --- the application page ----------------------------------------------------------------


def make_application(org, doc):
    return Application.objects.create(
        organization=org, name=doc["spec"]["name"], profile=org.profiles.get(), manifest=doc
    )


def test_the_page_shows_the_snippets_with_copy_buttons(as_viewer, org):
    make_application(org, manifest("hf://BAAI/bge-m3", name="embedder"))
    page = as_viewer.get(reverse("jobs:application-detail", args=["embedder"])).content.decode()
    assert "Call it from code" in page
    for language in ("python", "curl", "javascript"):
        assert f'id="snippet-{language}"' in page
        assert f'data-copy="#snippet-{language}"' in page
    assert "client.embeddings.create(model=&quot;embedder&quot;" in page
    assert "http://testserver/v1" in page
    assert "<script>" not in page.split('id="call-h"', 1)[1].split("</section>", 1)[0]


def test_the_page_escapes_what_it_fills_in(as_viewer, org):
    doc = manifest(name="chat")
    doc["spec"]["access"] = {"exposure": "Domain", "domain": 'x.com"><b>bold</b>'}
    make_application(org, doc)
    page = as_viewer.get(reverse("jobs:application-detail", args=["chat"])).content.decode()
    assert "<b>bold</b>" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


def test_a_model_off_the_openai_api_says_why_there_is_no_snippet(as_viewer, org):
    make_application(org, manifest("s3://bucket/model", name="churn", fmt="SKLearn"))
    page = as_viewer.get(reverse("jobs:application-detail", args=["churn"])).content.decode()
    assert "not the OpenAI API" in page and 'id="snippet-python"' not in page
