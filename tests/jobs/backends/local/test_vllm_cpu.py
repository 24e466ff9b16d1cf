"""vLLM's CPU build on the local backend, pure: which chat or embedding runtime a model gets
and why, and the command line and environment one replica is started with from the manifest."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from jobs.backends.local import runtimes as rt
from jobs.backends.local import vllm_cpu as vc
from models_catalog.architectures import text_embedding, text_generation

DIR = "/srv/runtimes"
AVX512 = frozenset({"avx2", "avx512f", "avx512_bf16"})
FIT = vc.Here(
    installed="0.32.0",
    instruction_set="AVX-512 with bf16",
    architectures=frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM"}),
    embedding_architectures=frozenset({"BertModel", "XLMRobertaModel"}),
)
ALL = frozenset({"transformers", "infinity", "faster-whisper", "vllm-cpu"})
LLAMA = rt.ModelFacts(task=rt.GENERATE, layout=rt.HF, architecture="LlamaForCausalLM")
MINILM = rt.ModelFacts(task=rt.EMBED, layout=rt.HF, architecture="BertModel")


def choose(facts=LLAMA, here=FIT, installed=ALL, vllm_installed=False):
    return rt.choose_runtime(
        facts, vllm_installed=vllm_installed, installed=installed, runtimes_dir=DIR, vllm_cpu=here
    )


# ---- which runtime, and why ----


@pytest.mark.parametrize(
    ("here", "installed", "runtime", "said"),
    [
        (FIT, ALL, "vllm-cpu", "this CPU runs its AVX-512 with bf16 kernels"),
        (FIT, ALL - {"transformers"}, "vllm-cpu", "vLLM serves the architecture LlamaForCausalLM"),
        (
            vc.Here(installed=None),
            ALL - {"vllm-cpu"},
            "transformers",
            "vLLM is not installed on this machine, and "  # the GPU vLLM, as ever
            f"not vLLM's CPU build, as it is not installed (install it with: "
            f"SERVEDECK_RUNTIMES_DIR={DIR} {rt.INSTALL_SCRIPT} vllm)",
        ),
        (
            vc.Here(installed="0.32.0", unfit="this CPU lacks AVX2, which vLLM's CPU build needs"),
            ALL,
            "transformers",
            "as this CPU lacks AVX2",
        ),
        (
            vc.Here(installed="0.32.0", off=True, architectures=FIT.architectures),
            ALL,
            "transformers",
            "as SERVEDECK_VLLM_CPU is off on this console",
        ),
        (
            vc.Here(installed="0.32.0", architectures=frozenset({"Qwen2ForCausalLM"})),
            ALL,
            "transformers",
            "as vLLM 0.32.0 does not serve the architecture LlamaForCausalLM",
        ),
    ],
)
def test_chat_goes_to_vllm_on_the_cpu_where_it_can_else_transformers_saying_why(
    here, installed, runtime, said
):
    choice = choose(here=here, installed=installed)
    assert isinstance(choice, rt.Choice), choice
    assert choice.runtime == runtime
    assert said in choice.why
    assert choice.cpu is rt.CPU_RUNTIMES[runtime]


def test_a_model_naming_no_architecture_stays_on_transformers():
    facts = rt.ModelFacts(task=rt.GENERATE, layout=rt.HF)
    choice = choose(facts=facts)
    assert choice.runtime == "transformers"
    assert "names no architecture" in choice.why


@pytest.mark.parametrize(
    ("here", "install"),
    [
        (vc.Here(installed=None, architectures=FIT.architectures), "vllm"),
        (vc.Here(installed=None, unfit="it is installed on x86-64 CPUs only"), ""),
    ],
)
def test_with_neither_chat_runtime_the_refusal_installs_the_one_that_would_serve(here, install):
    """vLLM's CPU build where this CPU and the architecture allow it, else transformers."""
    refused = choose(here=here, installed=frozenset({"infinity"}))
    assert isinstance(refused, rt.Refusal)
    wanted = "vllm" if install else "transformers"
    assert refused.install == rt.install_command(wanted, DIR)


@pytest.mark.parametrize(
    ("here", "installed", "runtime", "said"),
    [
        (FIT, ALL, "vllm-cpu", "serves embeddings on its pooling runner"),
        (
            FIT,
            ALL - {"infinity"},
            "vllm-cpu",
            "vLLM serves the architecture BertModel for text embeddings, and this CPU runs its "
            "AVX-512 with bf16 kernels",
        ),
        (
            vc.Here(installed=None),
            ALL - {"vllm-cpu"},
            "infinity",
            "infinity-emb serves embeddings; vLLM is not installed on this machine, and not "
            "vLLM's CPU build, as it is not installed (install it with: "
            f"SERVEDECK_RUNTIMES_DIR={DIR} {rt.INSTALL_SCRIPT} vllm)",
        ),
        (
            vc.Here(installed="0.32.0", unfit="this CPU lacks AVX2, which vLLM's CPU build needs"),
            ALL,
            "infinity",
            "as this CPU lacks AVX2",
        ),
        (
            vc.Here(
                installed="0.32.0", off=True, embedding_architectures=FIT.embedding_architectures
            ),
            ALL,
            "infinity",
            "as SERVEDECK_VLLM_CPU is off on this console",
        ),
        (
            # Chat architectures are no embedding ones: each task has its own list.
            vc.Here(installed="0.32.0", architectures=frozenset({"BertModel"})),
            ALL,
            "infinity",
            "as vLLM 0.32.0 does not serve the architecture BertModel for text embeddings",
        ),
    ],
)
def test_embeddings_go_to_vllm_on_the_cpu_where_it_can_else_infinity_saying_why(
    here, installed, runtime, said
):
    choice = choose(facts=MINILM, here=here, installed=installed)
    assert isinstance(choice, rt.Choice), choice
    assert choice.runtime == runtime
    assert said in choice.why
    assert choice.cpu is rt.CPU_RUNTIMES[runtime]


def test_an_embedding_model_naming_no_architecture_stays_on_infinity():
    choice = choose(facts=rt.ModelFacts(task=rt.EMBED, layout=rt.HF))
    assert choice.runtime == "infinity"
    assert "names no architecture" in choice.why


@pytest.mark.parametrize(
    ("here", "install"),
    [
        (vc.Here(installed=None, embedding_architectures=FIT.embedding_architectures), "vllm"),
        (vc.Here(installed=None, embedding_architectures=frozenset({"RobertaModel"})), ""),
        (vc.Here(installed=None, unfit="it is installed on x86-64 CPUs only"), ""),
    ],
)
def test_with_neither_embedding_runtime_the_refusal_installs_the_one_that_would_serve(
    here, install
):
    """vLLM's CPU build where this CPU and the architecture allow it, else infinity-emb."""
    refused = choose(facts=MINILM, here=here, installed=frozenset({"transformers"}))
    assert isinstance(refused, rt.Refusal)
    wanted = "vllm" if install else "infinity"
    assert refused.install == rt.install_command(wanted, DIR)


def test_an_embedding_model_whose_files_are_refused_is_refused_on_vllm_too():
    """The files check (modules.json's classes) stands whichever runtime would serve it: vLLM
    reads the same modules.json for its pooling, and would answer other vectors."""
    said = "modules.json of file:///m names the module type custom.Pool; ..."
    facts = rt.ModelFacts(rt.EMBED, rt.HF, "BertModel", files_refusal=said)
    refused = choose(facts=facts)
    assert isinstance(refused, rt.Refusal)
    assert refused.message == said and refused.install is None


@pytest.mark.parametrize(
    ("facts", "runtime"),
    [
        # No cross-encoder is packaged: reranking was not measured, and stays on infinity.
        (rt.ModelFacts(task=rt.SCORE, layout=rt.HF, architecture="BertForSeq"), "infinity"),
        # A CTranslate2 Whisper is no model vLLM loads.
        (rt.ModelFacts(task=rt.TRANSCRIBE, layout=rt.CTRANSLATE2), "faster-whisper"),
    ],
)
def test_reranking_and_transcription_keep_their_runtimes(facts, runtime):
    assert choose(facts=facts).runtime == runtime


def test_a_replica_on_a_gpu_still_gets_the_gpu_vllm():
    gpu = rt.ModelFacts(rt.GENERATE, rt.HF, "LlamaForCausalLM", wants_gpu=True)
    assert choose(facts=gpu, vllm_installed=True).runtime == "vllm"


@pytest.mark.parametrize(("facts", "runtime"), [(LLAMA, "transformers"), (MINILM, "infinity")])
def test_without_its_facts_the_choice_is_as_before_vllm_on_the_cpu(facts, runtime):
    choice = rt.choose_runtime(facts, vllm_installed=False, installed=ALL, runtimes_dir=DIR)
    assert choice.runtime == runtime


def test_the_registry_data_serves_the_packaged_chat_model_for_text():
    served = text_generation("0.32.0")
    assert "LlamaForCausalLM" in served
    assert "LlavaForConditionalGeneration" not in served  # images need torchvision
    assert "BertModel" not in served  # embeddings: not chat


def test_the_registry_data_serves_the_packaged_embedding_model_as_text_embeddings():
    served = text_embedding("0.32.0")
    assert {"BertModel", "XLMRobertaModel", "NomicBertModel"} <= served
    assert "LlamaForCausalLM" not in served  # chat
    assert "BertForSequenceClassification" not in served  # a reranker: reranking
    assert "CLIPModel" not in served  # images need torchvision
    assert "TransformersEmbeddingModel" not in served  # vLLM's Transformers backend: any model
    newer = text_embedding("0.33.0")
    # One vector a token, sparse vectors, or images the data does not mark: not /v1/embeddings'.
    for name in ("ColBERTModernBertModel", "BertSpladeSparseEmbeddingModel", "BertForMaskedLM"):
        assert name not in newer
    assert "LlamaNemotronVLModel" not in newer
    assert "BgeM3EmbeddingModel" in newer


# ---- this CPU ----


@pytest.mark.parametrize(
    ("machine", "flags", "unfit", "kernels"),
    [
        ("x86_64", AVX512, None, "AVX-512 with bf16"),
        ("x86_64", {"avx2", "avx512f"}, None, "AVX-512"),
        ("x86_64", {"avx2"}, None, "AVX2"),
        ("x86_64", {"sse4_2", "avx"}, "lacks AVX2", "neither AVX2 nor AVX-512"),
        ("aarch64", {"asimd"}, "x86-64 CPUs only, and this one is aarch64", None),
    ],
)
def test_the_cpu_it_needs(machine, flags, unfit, kernels):
    found = vc.cpu_unfit(machine, flags)
    assert (found is None) if unfit is None else (unfit in found)
    if kernels is not None:
        assert vc.instruction_set(flags) == kernels


@pytest.mark.parametrize(
    ("asked", "flags", "served"),
    [
        ("auto", {"avx2"}, "float32"),  # no bfloat16 instructions: bfloat16 is many times slower
        (None, {"avx2", "avx512f"}, "float32"),
        ("auto", AVX512, "auto"),  # vLLM's own choice: the model's, float32 cast to bfloat16
        ("auto", {"avx2", "avx512f", "amx_bf16"}, "auto"),
        (None, AVX512, None),
        ("bfloat16", {"avx2"}, "bfloat16"),  # asked for: kept
        ("float16", AVX512, "float16"),
    ],
)
def test_auto_dtype_is_float32_where_the_cpu_has_no_bfloat16_instructions(asked, flags, served):
    assert vc.served_dtype(asked, flags) == served


def test_check_model_says_what_auto_serves_in_here():
    avx2 = vc.Here(
        installed="0.32.0",
        instruction_set="AVX2",
        auto_dtype="float32",
        architectures=FIT.architectures,
    )
    said = choose(here=avx2).why
    assert "this CPU runs its AVX2 kernels (engine.dtype auto serves in float32 here" in said
    assert "engine.dtype" not in choose().why


def test_the_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\nbugs\t\t: none\n")
    assert vc.cpu_flags(info) == {"fpu", "avx2", "avx512f"}
    assert vc.cpu_flags(tmp_path / "missing") == frozenset()


# ---- the manifest drives it ----


@pytest.mark.parametrize(
    ("kv", "memory", "gib"),
    [
        (2 * vc.GIB, 16 * vc.GIB, 2),  # kvCacheSize wins
        (1536 * 2**20, None, 2),  # rounded up: it reads whole GiB
        (100, None, 1),
        (None, 16 * vc.GIB, 4),  # a quarter of memory
        (None, 6 * vc.GIB, 1),  # rounded down, at least 1
        (None, None, None),  # vLLM sizes it
    ],
)
def test_kv_cache_space(kv, memory, gib):
    assert vc.kv_cache_gib(kv, memory) == gib


@pytest.mark.parametrize(
    ("cores", "allowed", "threads"),
    [
        (None, [0, 1], None),  # OpenMP's own: one per CPU allowed
        (Fraction(1), [0, 1], 1),
        (Fraction(2), [0, 1], 2),
        (Fraction(1, 2), [0, 1, 2, 3], 1),  # 500m: one thread
        (Fraction(3, 2), [0, 1, 2, 3], 2),
        (Fraction(16), [4, 5, 6], 3),  # never more than the CPUs allowed
        (Fraction(2), [], None),
    ],
)
def test_the_engine_threads_from_resources_cpu(cores, allowed, threads):
    assert vc.engine_threads(cores, allowed) == threads


def test_the_compile_cache_is_one_per_version_and_model():
    one = vc.compile_cache("/var/vllm-cache", "0.32.0", "/models/smollm2-135m-instruct")
    assert one.parent == Path("/var/vllm-cache/0.32.0")
    assert one.name.startswith("smollm2-135m-instruct-")
    assert one == vc.compile_cache("/var/vllm-cache", "0.32.0", "/models/smollm2-135m-instruct")
    assert one != vc.compile_cache("/var/vllm-cache", "0.33.0", "/models/smollm2-135m-instruct")
    assert one != vc.compile_cache("/var/vllm-cache", "0.32.0", "/other/smollm2-135m-instruct")
    odd = vc.compile_cache("/c", "../1", "/m/../weird name")
    assert odd.parent.parent == Path("/c") and ".." not in odd.parts


def test_the_environment_it_reads():
    env = vc.environment(3, 2, Path("/var/vllm-cache/0.32.0/m-1"))
    assert env == {
        # The engine in one process: its executor's worker inside the engine core.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CACHE_ROOT": "/var/vllm-cache/0.32.0/m-1",
        "TORCHINDUCTOR_CACHE_DIR": "/var/vllm-cache/0.32.0/inductor",
        "VLLM_USE_AOT_COMPILE": "0",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "3",
        "OMP_NUM_THREADS": "2",
    }
    assert "VLLM_CPU_KVCACHE_SPACE" not in vc.environment(None, None, Path("/c"))
    assert "LD_PRELOAD" not in env
    preload = ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/r/vllm/lib/libiomp5.so"]
    with_preload = vc.environment(None, None, Path("/c"), preload)
    assert with_preload["LD_PRELOAD"] == ":".join(preload)
    # No thread count asked: OpenMP's own; and its threads are never bound (KMP_AFFINITY).
    assert not any(name.startswith(("KMP_", "OMP_")) for name in with_preload)


def test_the_preloads_are_the_venvs_openmp_and_the_machines_tcmalloc_where_they_are(tmp_path):
    venv = tmp_path / "vllm"
    assert vc.preloads(venv) == [str(p) for p in vc.TCMALLOC if p.is_file()][:1]
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "libiomp5.so").write_bytes(b"")
    found = vc.preloads(venv)
    assert found[-1] == str(venv / "lib" / "libiomp5.so")
    assert all(Path(lib).is_file() for lib in found)


def test_a_replica_runs_the_api_server_module_from_its_venv_with_the_engine_args():
    launch = rt.cpu_launch(
        "vllm-cpu",
        model="/models/smollm2-135m-instruct",
        name="chat",
        port=41234,
        runtimes_dir=DIR,
        engine_args=["--max-model-len", "2048", "--max-num-seqs", "4"],
        engine_env={"VLLM_CPU_KVCACHE_SPACE": "2"},
    )
    assert launch.argv == [
        f"{DIR}/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/smollm2-135m-instruct", "--served-model-name", "chat",
        "--host", "127.0.0.1", "--port", "41234", "--max-model-len", "2048",
        "--max-num-seqs", "4",
    ]  # fmt: skip
    assert launch.model_id == "chat"
    assert launch.readiness_path == "/health"
    assert launch.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert launch.env["HF_HUB_OFFLINE"] == "1" and launch.env["DO_NOT_TRACK"] == "1"
    assert launch.cwd is None


@pytest.mark.parametrize(
    ("task", "runner"), [(rt.EMBED, ["--runner", "pooling"]), (rt.GENERATE, []), (None, [])]
)
def test_an_embedding_model_runs_on_the_pooling_runner(task, runner):
    chosen = {} if task is None else {"task": task}  # without one: chat, as before
    launch = rt.cpu_launch(
        "vllm-cpu", model="/models/minilm", name="minilm", port=41234, runtimes_dir=DIR,
        engine_args=["--max-num-seqs", "16"], **chosen,
    )  # fmt: skip
    assert launch.argv[-len(runner) - 2 :] == [*runner, "--max-num-seqs", "16"]
    assert launch.argv[3:5] == ["--model", "/models/minilm"]


def test_the_manifest_maps_to_the_replicas_arguments_and_environment(settings, tmp_path):
    from jobs.backends.local.replica_start import vllm_cpu_settings
    from jobs.backends.local.state import AppState

    settings.SERVEDECK_VLLM_CACHE_DIR = str(tmp_path / "cache")
    model = {
        "uri": "hf://HuggingFaceTB/SmolLM2-135M-Instruct:" + "a" * 40,
        "engine": {"dtype": "float32", "extraArgs": ["--enforce-eager"]},
        "serving": {"maxContextTokens": 2048, "maxConcurrentRequests": 4, "kvCacheSize": "3Gi"},
        "resources": {"cpu": "1", "memory": "8Gi"},
    }
    manifest = {"spec": {"name": "chat", "source": {"type": "Model", "model": model}}}
    state = AppState(name="chat", revision=1, manifest=manifest, template="", runtime="vllm-cpu")
    engine, env = vllm_cpu_settings(state, "/snap/smollm2", Path(DIR))
    assert engine == [
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--enforce-eager",
    ]  # fmt: skip  (no --revision: the snapshot folder is that revision)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["OMP_NUM_THREADS"] == "1"
    cache = Path(env["VLLM_CACHE_ROOT"])
    assert cache.parent == tmp_path / "cache" / "unknown"  # no vLLM installed in DIR
    model["engine"]["dtype"] = "bfloat16"
    assert vllm_cpu_settings(state, "/snap/smollm2", Path(DIR))[0][:2] == ["--dtype", "bfloat16"]
    model["engine"]["dtype"] = "auto"  # as this machine's CPU serves it
    auto = vc.served_dtype("auto", vc.cpu_flags())
    assert vllm_cpu_settings(state, "/snap/smollm2", Path(DIR))[0][:2] == ["--dtype", auto]
    del model["serving"]["kvCacheSize"], model["resources"]["cpu"]
    _, env = vllm_cpu_settings(state, "/snap/smollm2", Path(DIR))
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # a quarter of 8Gi
    assert "OMP_NUM_THREADS" not in env
