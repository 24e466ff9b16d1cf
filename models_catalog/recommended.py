"""ServeDeck's recommended serving parameters for well-known models: starting points a model
master is made from. Parser names and flags are vLLM's; sizes assume 80 GB-class GPUs where a
model needs more than one. Also the first models offered to an organisation with nothing
deployed yet (FIRST_MODELS).
"""

from dataclasses import dataclass

VLLM_IMAGE = "vllm/vllm-openai:v0.13.0"


def _entry(model_id, **fields):
    return {"model_id": model_id, "runtime": "vllm", "image": VLLM_IMAGE, **fields}


RECOMMENDED = [
    _entry(
        "meta-llama/Llama-3.1-8B-Instruct",
        dtype="bfloat16",
        tool_call_parser="llama3_json",
        max_context_tokens=32768,
        tensor_parallel_size=1,
        notes="Full 131072-token context needs about 16 GiB of KV cache per sequence.",
    ),
    _entry(
        "meta-llama/Llama-3.1-70B-Instruct",
        dtype="bfloat16",
        tool_call_parser="llama3_json",
        max_context_tokens=32768,
        tensor_parallel_size=4,
        notes="About 141 GB of bf16 weights: four 80 GB GPUs leave room for the KV cache.",
    ),
    _entry(
        "Qwen/Qwen2.5-7B-Instruct",
        dtype="bfloat16",
        tool_call_parser="hermes",
        max_context_tokens=32768,
        tensor_parallel_size=1,
    ),
    _entry(
        "Qwen/Qwen3-8B",
        dtype="bfloat16",
        reasoning_parser="qwen3",
        tool_call_parser="hermes",
        max_context_tokens=32768,
        tensor_parallel_size=1,
    ),
    _entry(
        "Qwen/Qwen3-30B-A3B",
        dtype="bfloat16",
        reasoning_parser="qwen3",
        tool_call_parser="hermes",
        max_context_tokens=32768,
        tensor_parallel_size=2,
        notes="Mixture of experts: 30B parameters held, 3B active per token.",
    ),
    _entry(
        "mistralai/Mistral-7B-Instruct-v0.3",
        dtype="bfloat16",
        tool_call_parser="mistral",
        max_context_tokens=32768,
        tensor_parallel_size=1,
        extra_args=[
            "--tokenizer-mode",
            "mistral",
            "--config-format",
            "mistral",
            "--load-format",
            "mistral",
        ],
    ),
    _entry(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        dtype="bfloat16",
        tool_call_parser="mistral",
        max_context_tokens=32768,
        tensor_parallel_size=2,
    ),
    _entry(
        "google/gemma-3-27b-it",
        dtype="bfloat16",
        max_context_tokens=32768,
        tensor_parallel_size=1,
        notes="Vision model: images count against the context.",
    ),
    _entry(
        "openai/gpt-oss-20b",
        tool_call_parser="openai",
        tensor_parallel_size=1,
        max_context_tokens=131072,
        notes="MXFP4 weights; fits one 24 GB GPU or more.",
    ),
    _entry(
        "openai/gpt-oss-120b",
        tool_call_parser="openai",
        tensor_parallel_size=1,
        max_context_tokens=131072,
        notes="MXFP4 weights; fits one 80 GB GPU.",
    ),
    _entry(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        dtype="bfloat16",
        reasoning_parser="deepseek_r1",
        max_context_tokens=32768,
        tensor_parallel_size=1,
    ),
    _entry(
        "BAAI/bge-m3",
        dtype="float16",
        max_context_tokens=8192,
        tensor_parallel_size=1,
        notes="Embedding model: answers /v1/embeddings.",
    ),
    _entry(
        "BAAI/bge-reranker-v2-m3",
        dtype="float16",
        max_context_tokens=8192,
        tensor_parallel_size=1,
        notes="Reranker: answers /v1/score and /v1/rerank.",
    ),
    _entry(
        "openai/whisper-large-v3",
        dtype="float16",
        tensor_parallel_size=1,
        notes="Speech to text: answers /v1/audio/transcriptions.",
    ),
    # The speech-to-text runtime brings its own image and settings (no dtype, quantisation,
    # tensor parallel or parsers to choose).
    {
        "model_id": "nvidia/parakeet-tdt-0.6b-v3",
        "runtime": "parakeet",
        "image": "",
        "notes": "Served by the speech-to-text runtime: /v1/audio/transcriptions.",
    },
]

BY_MODEL_ID = {entry["model_id"]: entry for entry in RECOMMENDED}


# ---- first models: what an organisation with nothing deployed is offered ----


@dataclass(frozen=True)
class FirstModel:
    """A small model the dashboard offers as a one-click deploy from the Hub: it loads in a
    minute on a CPU, so a newcomer sees an answer before deciding anything."""

    key: str  # in the deploy button's URL
    label: str
    uri: str
    task: str  # what it answers, in the product's words
    route: str  # the gateway route it answers
    size: str  # roughly, for the card


FIRST_MODELS = (
    FirstModel(
        "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct",
        "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
        "Chat",
        "/v1/chat/completions",
        "135M parameters, 270 MB",
    ),
    FirstModel(
        "all-minilm-l6-v2",
        "all-MiniLM-L6-v2",
        "hf://sentence-transformers/all-MiniLM-L6-v2",
        "Embeddings",
        "/v1/embeddings",
        "23M parameters, 90 MB",
    ),
    FirstModel(
        "faster-whisper-tiny-en",
        "Whisper tiny.en",
        "hf://Systran/faster-whisper-tiny.en",
        "Speech to text",
        "/v1/audio/transcriptions",
        "39M parameters, 75 MB",
    ),
)
FIRST_MODELS_BY_KEY = {model.key: model for model in FIRST_MODELS}
