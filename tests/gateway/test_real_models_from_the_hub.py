"""Real weights from the Hub, end to end: hf:// SmolLM2-135M-Instruct, all-MiniLM-L6-v2 and
faster-whisper tiny.en deployed through the REST API on the local profile, with no vLLM and
no SERVEDECK_LOCAL_COMMAND: the real local backend reads each repository from the Hub,
chooses the real CPU runtime, and each replica downloads its snapshot with the real
huggingface_hub client into the downloads folder before the runtime starts on it offline;
then the official openai client calls them through the gateway with an API key.

The Hub is the fake one serving the packaged models' folders from disk (tests/fakes/hub.py,
disk_repo), with the copies a real repository carries beside them (ONNX, PyTorch .bin) that
no runtime here reads and that must not be fetched. Skipped and failed like
test_real_models_end_to_end (CI=true: a missing runtime or model fails it).
"""

from __future__ import annotations

import httpx
import pytest

from jobs.backends.local import download_files
from jobs.backends.local import runtimes as rt
from tests.fakes.hub import FakeHub, disk_repo
from tests.gateway.support import IN_CI, MISSING, WHY_MISSING
from tests.gateway.test_real_models_end_to_end import caller, follow, the_three_answer
from tests.helpers import bearer
from tests.manifest_text import local_manifest

pytestmark = [
    pytest.mark.real_models,
    pytest.mark.database_file,  # the live server is another process: a database file
    pytest.mark.skipif(bool(MISSING) and not IN_CI, reason=WHY_MISSING),
]
CHAT = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBED = "sentence-transformers/all-MiniLM-L6-v2"
WHISPER = "Systran/faster-whisper-tiny.en"


@pytest.fixture
def hub_of_packaged_models(real_machine, settings, tmp_path, monkeypatch):
    """The packaged models as Hub repositories, each listing copies no CPU runtime reads, and
    a downloads folder of this test's own; HF_ENDPOINT is set before the live console forks."""
    other_copies = {"onnx/model.onnx": 90 << 20, "pytorch_model.bin": 90 << 20}
    repos = {
        CHAT: disk_repo(CHAT, real_machine.chat, blobs=other_copies),
        EMBED: disk_repo(EMBED, real_machine.embedding, blobs=other_copies),
        WHISPER: disk_repo(WHISPER, real_machine.transcription),
    }
    settings.SERVEDECK_DOWNLOADS_DIR = tmp_path / "downloads"
    # Chat on transformers serve here: this test is about downloads, and one vLLM start per run
    # (test_real_models_end_to_end's) keeps CI's time (vLLM compiles for minutes on 2 cores).
    settings.SERVEDECK_VLLM_CPU = "off"
    with FakeHub(repos).serve() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_hub_models_download_and_answer_through_the_gateway(
    hub_of_packaged_models, console_server, admin, tmp_path
):
    hub, live = hub_of_packaged_models, console_server
    headers = {"Authorization": bearer(admin)["HTTP_AUTHORIZATION"]}
    deployed = (("chat", CHAT), ("minilm", EMBED), ("whisper", WHISPER))
    for name, repo in deployed:
        created = httpx.post(
            f"{live}/api/v1/applications",
            headers={**headers, "Content-Type": "application/yaml"},
            content=local_manifest(name, f"hf://{repo}"),
            timeout=60,
        )
        assert created.status_code == 201, created.text
        got = httpx.get(f"{live}/api/v1/applications/{name}", headers=headers, timeout=60)
        pinned = got.json()["spec"]["source"]["model"]["uri"]
        assert pinned == f"hf://{repo}:{hub.repos[repo].sha}"  # the snapshot folder is fixed
    for name, _ in deployed:
        follow(name, "Running")

    downloads = tmp_path / "downloads"
    chat_folder = downloads / f"models--{CHAT.replace('/', '--')}" / "snapshots"
    snapshot = chat_folder / hub.repos[CHAT].sha
    assert sorted(p.name for p in snapshot.iterdir()) == runtime_files(hub, CHAT)
    fetched = [r.path for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    assert fetched and not [p for p in fetched if "onnx" in p or "pytorch_model" in p], fetched

    client = caller(live, "hub-caller")
    the_three_answer(client, tmp_path)
    client.close()


def runtime_files(hub: FakeHub, repo: str) -> list[str]:
    """The files of a served repository its CPU runtime reads (what must be downloaded)."""
    names = list(hub.repos[repo].files)
    return download_files.files_to_download(names, rt.weights_layout(names))
