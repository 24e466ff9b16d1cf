"""Check model, verdict by verdict, against the fake Hub through the real client."""

import json

import pytest

from jobs.machine_catalog import DEFAULT_MACHINE_CATALOG
from models_catalog import hub
from models_catalog.check import check_model
from models_catalog.check_types import SERVABLE, CheckResult
from models_catalog.sizing import GiB
from tests.fakes.hub import GOOD_TOKEN, NO_ACCESS_TOKEN, closed_endpoint, silent_endpoint

CATALOG = DEFAULT_MACHINE_CATALOG


def check(uri: str, **options) -> CheckResult:
    return check_model(uri, catalog=CATALOG, **options)


def assert_refused(result: CheckResult, *words: str) -> None:
    assert not result.can_serve and not result.inconclusive
    assert result.verdict != SERVABLE and result.next_step
    for word in words:
        assert word in result.verdict + " " + result.next_step, result


# ---- servable models ----

SERVABLE_MODELS = [
    # repo, token, runtime, task, architecture, modalities, max context, KV/token, suggestion
    ("meta-llama/Llama-3.1-8B-Instruct", GOOD_TOKEN, "vllm", "generate", "LlamaForCausalLM", [],
     131072, 131072, "1 x a100-40gb GPU"),
    ("meta-llama/Llama-3.1-70B-Instruct", GOOD_TOKEN, "vllm", "generate", "LlamaForCausalLM", [],
     131072, 327680, "2 x h200 GPUs"),
    ("Qwen/Qwen2.5-7B-Instruct", None, "vllm", "generate", "Qwen2ForCausalLM", [],
     32768, 57344, "1 x a10g GPU"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", None, "vllm", "generate", "Qwen2ForCausalLM", [],
     32768, 57344, "1 x t4 GPU"),
    ("Qwen/Qwen3-30B-A3B", None, "vllm", "generate", "Qwen3MoeForCausalLM", [],
     40960, 98304, "1 x h100 GPU"),
    ("mistralai/Mistral-7B-Instruct-v0.3", GOOD_TOKEN, "vllm", "generate", "MistralForCausalLM",
     [], 32768, 131072, "1 x a10g GPU"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", GOOD_TOKEN, "vllm", "generate",
     "MixtralForCausalLM", [], 32768, 131072, "1 x h200 GPU"),
    ("google/gemma-3-27b-it", GOOD_TOKEN, "vllm", "generate", "Gemma3ForConditionalGeneration",
     ["image"], 131072, 507904, "1 x h100 GPU"),
    ("deepseek-ai/DeepSeek-V3", None, "vllm", "generate", "DeepseekV3ForCausalLM", [],
     163840, 70272, "8 x h200 GPUs"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", None, "vllm", "generate", "Qwen2ForCausalLM",
     [], 16384, 57344, "1 x a10g GPU"),
    ("openai/gpt-oss-20b", None, "vllm", "generate", "GptOssForCausalLM", [],
     131072, 49152, "1 x a10g GPU"),
    ("BAAI/bge-m3", None, "vllm", "embed", "XLMRobertaModel", [], 8192, 0, "1 x t4 GPU"),
    ("BAAI/bge-reranker-v2-m3", None, "vllm", "score", "XLMRobertaForSequenceClassification",
     [], 8192, 0, "1 x t4 GPU"),
    ("openai/whisper-large-v3", None, "vllm", "transcribe", "WhisperForConditionalGeneration",
     ["audio"], 448, 163840, "1 x t4 GPU"),
    ("nvidia/parakeet-tdt-0.6b-v3", None, "parakeet", "transcribe", "ParakeetForTDT", ["audio"],
     None, None, "1 x t4 GPU"),
    ("HuggingFaceTB/SmolLM3-3B", None, "vllm", "generate", "SmolLM3ForCausalLM", [],
     65536, 73728, "1 x t4 GPU"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("repo", "token", "runtime", "task", "arch", "modalities", "tokens", "kv", "where"),
    SERVABLE_MODELS,
    ids=[row[0] for row in SERVABLE_MODELS],
)
def test_servable(hub_env, repo, token, runtime, task, arch, modalities, tokens, kv, where):
    result = check(f"hf://{repo}", hf_token=token)
    assert result.can_serve, result.verdict
    assert result.verdict == SERVABLE
    assert (result.runtime, result.task, result.architecture) == (runtime, task, arch)
    assert result.modalities == modalities
    assert (result.max_context_tokens, result.kv_bytes_per_token) == (tokens, kv)
    assert result.context_tokens == tokens
    assert result.suggestion.describe() == where
    assert result.next_step.startswith(f"Deploy it on {where}")
    assert result.revision == hub_env.repos[repo].sha
    assert result.cache_size and result.cache_size.endswith("Gi")
    assert result.parameters > 0 and result.weight_bytes > 0
    assert not result.inconclusive
    json.dumps(result.as_dict())  # JSON-able for the API and the wizard


def test_llama_8b_in_detail(hub_env):
    result = check("hf://meta-llama/Llama-3.1-8B-Instruct", hf_token=GOOD_TOKEN)
    assert result.parameters == 8_030_261_248
    assert result.weight_dtype == "bfloat16" and result.weight_source == "hub"
    assert result.weight_bytes == 16_060_522_496
    # (16_060_522_496 weights + 16 GiB KV + 2 GiB overhead) / 0.9, rounded up
    assert result.memory_needed_bytes == 39_319_861_476
    assert result.gpu_memory_utilization == 0.9
    assert result.cache_size == "17Gi"  # 4 shards: 16_060_617_592 B x 1.1 = 16.5 GiB
    assert result.unfit == []
    assert [o.gpu_kind for o in result.options] == [k["name"] for k in CATALOG]
    assert result.custom_code is False
    data = result.as_dict()
    assert data["suggestion"]["gpu_kind"] == "a100-40gb"
    assert data["suggestion"]["node_labels"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


def test_context_and_concurrency_size_the_cache(hub_env):
    result = check("hf://meta-llama/Llama-3.1-8B-Instruct", hf_token=GOOD_TOKEN,
                   context_tokens=8192, concurrency=4)  # fmt: skip
    # (16_060_522_496 + 4 x 8192 x 128 KiB + 2 GiB) / 0.9
    assert result.memory_needed_bytes == -(-(16_060_522_496 + 4 * GiB + 2 * GiB) * 10 // 9)
    assert (result.context_tokens, result.concurrency) == (8192, 4)
    # 25.0e9 B: more than an l4 or an a10g holds; the a100-40gb is the next smallest GPU
    assert result.suggestion.gpu_kind == "a100-40gb"


def test_vllm_version_changes_the_default_utilisation(hub_env):
    result = check("hf://Qwen/Qwen2.5-7B-Instruct", vllm_version="0.33.0")
    assert result.gpu_memory_utilization == 0.92 and result.vllm_version == "0.33.0"


def test_check_reads_little(hub_env):  # its timings are in bench/check_model_bench.py
    result = check("hf://deepseek-ai/DeepSeek-V3")
    assert result.can_serve
    assert hub_env.bytes_sent() < 256 * 1024
    assert not any(r.path.endswith(".safetensors") for r in hub_env.requests)


def test_without_the_hub_summary_the_headers_answer_the_same(hub_env, headers_hub_server):
    repo = "hf://Qwen/Qwen2.5-7B-Instruct-AWQ"
    summary = check(repo)
    headers = check(repo, hf_endpoint=headers_hub_server.url)
    assert (summary.weight_source, headers.weight_source) == ("hub", "headers")
    for name in ("parameters", "weight_bytes", "memory_needed_bytes", "cache_size"):
        assert getattr(summary, name) == getattr(headers, name), name


# ---- warnings ----


def test_an_unpinned_revision_is_a_warning_naming_the_commit(hub_env):
    sha = hub_env.repos["Qwen/Qwen2.5-7B-Instruct"].sha
    result = check("hf://Qwen/Qwen2.5-7B-Instruct")
    assert any(f"pin it as hf://Qwen/Qwen2.5-7B-Instruct:{sha}" in w for w in result.warnings)
    tagged = check("hf://Qwen/Qwen2.5-7B-Instruct:main")
    assert any("its main branch or tag" in w for w in tagged.warnings)
    pinned = check(f"hf://Qwen/Qwen2.5-7B-Instruct:{sha}")
    assert pinned.can_serve and pinned.warnings == [] and pinned.revision == sha


def test_transformers_backend_is_a_warning(hub_env):
    result = check("hf://HuggingFaceTB/SmolLM3-3B")
    assert result.can_serve
    assert any("Transformers backend" in w for w in result.warnings)


def test_custom_code_with_a_native_implementation_is_a_warning(hub_env):
    result = check("hf://deepseek-ai/DeepSeek-V3")
    assert result.can_serve and result.custom_code
    assert any("custom code" in w and "not run" in w for w in result.warnings)


def test_pickle_weights_are_a_warning(hub_env):
    result = check("hf://BAAI/bge-m3")
    assert result.weight_source == "file sizes"
    assert any(".bin (pickle)" in w for w in result.warnings)


# ---- refusals ----


@pytest.mark.parametrize(
    ("uri", "token", "words"),
    [
        ("hf://meta-llama/Llama-3.1-8B-Instruct", None,
         ["is gated, and the profile has no Hugging Face token", "Accept the model's terms at"]),
        ("hf://meta-llama/Llama-3.1-8B-Instruct", NO_ACCESS_TOKEN,
         ["token has no access to the gated model", "Request access at"]),
        ("hf://Qwen/Qwen2.5-7B-Instruct", "hf_revoked",
         ["rejected the profile's token", "Replace the Hugging Face token"]),
        ("hf://acme/does-not-exist", None,
         ["There is no model acme/does-not-exist", "Check the repository id"]),
        ("hf://acme/mystery-net-7b", None,
         ["vLLM 0.13.0 has no implementation of the architecture MysteryNetForCausalLM"]),
        ("hf://meta-llama/Llama-3.2-11B-Vision-Instruct", GOOD_TOKEN,
         ["vLLM served MllamaForConditionalGeneration until version 0.10.2",
          "a runtime with vLLM 0.10.2"]),
        ("hf://facebook/bart-large-cnn", None, ["until version 0.10.2"]),
        ("hf://acme/remote-code-lm", None,
         ["needs custom code from its repository", "modeling_acme.AcmeLMForCausalLM",
          "does not run repository code"]),
        ("hf://acme/bert-onnx", None,
         ["has no weights vLLM reads", "onnx/model.onnx", "safetensors"]),
        ("hf://acme/llama-gguf", None, ["holds only GGUF files", "original model's repository"]),
        ("hf://nvidia/canary-1b-flash", None, ["is a NeMo checkpoint", "Parakeet"]),
        ("hf://acme/colossus-12t", None,
         ["too large for 64 GPUs of the largest kind in the catalog (b200)", "quantised"]),
        ("hf://acme/broken-config", None, ["is not valid JSON"]),
    ],
)  # fmt: skip
def test_refused(hub_env, uri, token, words):
    assert_refused(check(uri, hf_token=token), *words)


def test_out_of_tree_plugin(hub_env):
    result = check("hf://facebook/bart-large-cnn", vllm_version="0.33.0")
    assert_refused(result, "out-of-tree plugin https://github.com/vllm-project/bart-plugin")
    assert result.architecture == "BartForConditionalGeneration"


def test_missing_revision_names_the_current_commit(hub_env):
    sha = hub_env.repos["Qwen/Qwen2.5-7B-Instruct"].sha
    result = check("hf://Qwen/Qwen2.5-7B-Instruct:v9.9")
    assert_refused(result, "has no revision 'v9.9'", f"hf://Qwen/Qwen2.5-7B-Instruct:{sha}")


def test_too_large_names_every_kind(hub_env):
    result = check("hf://acme/colossus-12t")
    assert "its weights alone are 21.8 TiB, and it needs" in result.verdict
    assert result.parameters == 12 * 10**12 and result.suggestion is None
    assert [kind for kind, _ in result.unfit] == [k["name"] for k in CATALOG]
    assert "per GPU even with 8 GPUs on each of 8 nodes" in dict(result.unfit)["b200"]


def test_a_context_that_no_machine_holds_names_the_one_that_fits(hub_env):
    result = check("hf://meta-llama/Llama-3.1-8B-Instruct", hf_token=GOOD_TOKEN, concurrency=1024)
    assert_refused(result, "with 1024 requests at once", "fits with at most 81,367 tokens",
                   "serving.maxContextTokens to 81367", "maxConcurrentRequests")  # fmt: skip


def test_a_context_above_the_models_limit(hub_env):
    result = check("hf://Qwen/Qwen2.5-7B-Instruct", context_tokens=65536)
    assert_refused(result, "above the model's own limit of 32768", "to 32768 or less")


@pytest.mark.parametrize(
    "catalog",
    [[], [dict(CATALOG[-1], name="mi300x", vendor="amd", gpuMemory="196608Mi")]],
    ids=["empty", "amd-only"],
)
def test_no_nvidia_gpu_kinds_in_the_catalog(hub_env, catalog):
    result = check_model("hf://Qwen/Qwen2.5-7B-Instruct", catalog=catalog)
    assert_refused(result, "no NVIDIA GPU kinds", "Add GPU kinds")


@pytest.mark.parametrize(("tokens", "requests"), [(0, 1), (None, 0), (-5, 2)])
def test_context_and_concurrency_must_be_positive(tokens, requests):
    result = check("hf://Qwen/Qwen2.5-7B-Instruct", context_tokens=tokens, concurrency=requests)
    assert_refused(result, "at least 1", "serving.maxConcurrentRequests")


# ---- the Hub cannot be asked ----


def test_unreachable_hub_is_inconclusive():
    hub.clear_cache()
    with closed_endpoint() as endpoint:
        result = check("hf://Qwen/Qwen2.5-7B-Instruct", hf_endpoint=endpoint)
    assert result.inconclusive and not result.can_serve
    assert result.verdict.startswith(f"Could not reach the Hugging Face Hub at {endpoint}: ")
    assert result.verdict.endswith("; try again, or check HF_ENDPOINT")


def test_a_silent_hub_is_inconclusive_within_the_budget(monkeypatch):
    hub.clear_cache()
    monkeypatch.setenv(hub.TIME_BUDGET_ENV, "0.5")  # check_model's budget
    with silent_endpoint() as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        result = check("hf://Qwen/Qwen2.5-7B-Instruct")
    assert result.inconclusive
    assert "no answer within 0.5 s" in result.verdict


# ---- anything but hf:// ----


@pytest.mark.parametrize(
    ("uri", "where"),
    [
        ("s3://models/churn/v3", "an S3 bucket"),
        ("s3://models/churn/v3?versionId=abc", "an S3 bucket"),
        ("gs://models/churn", "a Google Cloud Storage bucket"),
        ("pvc://model-store/churn", "a PersistentVolumeClaim"),
        ("oci://registry.example.com/models/churn:1.0", "an OCI image"),
        ("https://acct.blob.core.windows.net/models/churn", "Azure Blob Storage"),
    ],
)
def test_storage_needs_a_format(uri, where):
    result = check(uri)
    assert_refused(result, f"cannot look inside {where}", "spec.source.model.format")


@pytest.mark.parametrize(
    ("fmt", "runtime"),
    [("SKLearn", "sklearn"), ("XGBoost", "xgboost"), ("LightGBM", "lightgbm"),
     ("TensorFlow", "tensorflow"), ("PyTorch", "torchserve"), ("ONNX", "triton"),
     ("MLflow", "mlserver"), ("PMML", "kserve-pmmlserver"), ("Paddle", "kserve-paddleserver")],
)  # fmt: skip
def test_predictive_formats_run_on_cpu(fmt, runtime):
    result = check("s3://models/churn/v3", format=fmt)
    assert result.can_serve and result.verdict == SERVABLE
    assert (result.runtime, result.task) == (runtime, "predict")
    assert result.suggestion.accelerator == "cpu"
    assert result.next_step == (
        "Deploy it on CPU (1 CPU, 2Gi memory); raise resources.memory if it needs more."
    )
    assert any("cannot look inside an S3 bucket" in w for w in result.warnings)


def test_tensorrt_needs_a_gpu():
    result = check("gs://models/detector", format="TensorRT")
    assert result.can_serve and result.suggestion.accelerator == "gpu"
    assert result.suggestion.gpu_kind == "t4"  # the smallest GPU of the catalog
    no_gpus = check_model("gs://models/detector", catalog=[], format="TensorRT")
    assert_refused(no_gpus, "TensorRT models run on NVIDIA GPUs", "Add GPU kinds")


def test_vllm_from_storage_cannot_be_sized():
    result = check("pvc://model-store/llama", format="vLLM")
    assert result.can_serve and result.runtime == "vllm" and result.suggestion is None
    assert "size yourself; Check model could not" in result.next_step


def test_a_predictive_format_on_hf_is_answered_from_the_format():
    result = check("hf://acme/churn-model", format="XGBoost")
    assert result.can_serve and result.runtime == "xgboost"


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("hf://just-a-name", ["is not a Hugging Face repository id", "Give the full repository"]),
        ("huggingface.co/meta-llama/Llama-3.1-8B", ["has no scheme", "hf://BAAI/bge-m3"]),
        ("s3://key:secret@bucket/model", ["carries credentials", "Remove them"]),
        ("s3://bucket/model?X-Amz-Signature=abc", ["credentials in its query string",
                                                   "Remove the query"]),
        ("https://example.com/model.bin", ["is not an Azure Blob URL",
                                           "https://<account>.blob.core.windows.net/"]),
        ("ftp://host/model", ["the scheme 'ftp' is not accepted", "Use one of hf://, s3://"]),
        (" hf://Qwen/Qwen2.5-7B-Instruct ", ["contains spaces", "Remove them"]),
    ],
)  # fmt: skip
def test_uris_refused(uri, words):
    result = check(uri)
    assert result.verdict.startswith("uri: ")  # jobs.manifest's reason, then its fix
    assert_refused(result, *words)
    assert "secret" not in result.verdict


def test_unknown_format():
    result = check("s3://models/churn/v3", format="Keras")
    assert_refused(result, "'Keras' is not a model format", "SKLearn")


def test_an_hf_uri_gives_the_hub_its_repo_and_revision(hub_env):
    result = check("hf://Qwen/Qwen2.5-7B-Instruct:refs/pr/3")
    assert_refused(result, "Qwen/Qwen2.5-7B-Instruct has no revision 'refs/pr/3'")
