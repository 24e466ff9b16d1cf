"""The memory math of models_catalog.sizing, table by table; every expected figure is worked
out by hand in the comment beside it, from the real config.json files in the fake Hub."""

import json
from pathlib import Path

import pytest

from jobs.machine_catalog import DEFAULT_MACHINE_CATALOG
from models_catalog import sizing
from models_catalog.sizing import (
    Demand,
    GiB,
    cache_size,
    fit_kind,
    kv_bytes_per_token,
    kv_cache_bytes,
    logical_parameters,
    max_context,
    max_context_that_fits,
    model_shape,
    parse_bytes,
    size_on_catalog,
    stored_bytes,
    weight_dtype,
    weights_from_file_bytes,
    weights_from_safetensors,
)

REPOS = Path(__file__).parents[1] / "fakes" / "hub_repos"


def config(repo: str, name: str = "config.json") -> dict:
    return json.loads((REPOS / repo / name).read_text())


@pytest.mark.parametrize(
    ("repo", "per_token"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 131072),  # 2 x 32 layers x 8 kv x 128 x 2 B = 128 KiB
        ("meta-llama/Llama-3.1-70B-Instruct", 327680),  # 2 x 80 x 8 x 128 x 2
        ("Qwen/Qwen2.5-7B-Instruct", 57344),  # GQA: 2 x 28 x 4 kv x (3584/28=128) x 2
        ("Qwen/Qwen3-30B-A3B", 98304),  # 2 x 48 x 4 x 128 (head_dim given) x 2
        ("mistralai/Mistral-7B-Instruct-v0.3", 131072),  # 2 x 32 x 8 x 128 x 2
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 131072),  # experts do not add KV
        ("google/gemma-3-27b-it", 507904),  # text_config: 2 x 62 x 16 x 128 x 2
        ("deepseek-ai/DeepSeek-V3", 70272),  # MLA: 61 x (512 + 64) x 2, one latent per layer
        ("openai/gpt-oss-20b", 49152),  # 2 x 24 x 8 x 64 x 2
        ("openai/whisper-large-v3", 163840),  # decoder: 2 x 32 x 20 x (1280/20=64) x 2
        ("BAAI/bge-m3", 0),  # encoder-only: no KV cache
    ],
)
def test_kv_bytes_per_token(repo, per_token):
    assert kv_bytes_per_token(model_shape(config(repo))) == per_token


def test_llama_31_8b_kv_is_128_kib_per_token_in_bf16():
    shape = model_shape(config("meta-llama/Llama-3.1-8B-Instruct"))
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 8, 128)
    assert kv_bytes_per_token(shape) == 128 * 1024


@pytest.mark.parametrize(
    ("repo", "tokenizer", "encoder", "expected"),
    [
        # llama3 RoPE is not applied again; the tokenizer says 131072 too
        ("meta-llama/Llama-3.1-8B-Instruct", True, None, 131072),
        ("Qwen/Qwen2.5-7B-Instruct", True, None, 32768),  # max_position_embeddings
        ("Qwen/Qwen3-30B-A3B", True, None, 40960),  # rope_scaling null
        ("mistralai/Mistral-7B-Instruct-v0.3", True, None, 32768),  # tokenizer limit is 1e30
        ("google/gemma-3-27b-it", True, None, 131072),  # class default; gemma3 never rescaled
        ("deepseek-ai/DeepSeek-V3", True, None, 163840),  # yarn: 4096 original x 40
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", True, None, 16384),  # tokenizer caps 131072
        ("openai/gpt-oss-20b", True, None, 131072),  # yarn: 4096 x 32
        ("openai/whisper-large-v3", True, None, 448),  # max_target_positions
        ("BAAI/bge-reranker-v2-m3", True, None, 8192),  # min(8194, tokenizer's 8192)
        ("BAAI/bge-m3", True, "sentence_bert_config.json", 8192),  # max_seq_length wins
        ("facebook/bart-large-cnn", False, None, 1024),
    ],
)
def test_max_context_of_real_configs(repo, tokenizer, encoder, expected):
    tokenizer_config = config(repo, "tokenizer_config.json") if tokenizer else None
    encoder_config = config(repo, encoder) if encoder else None
    assert max_context(config(repo), tokenizer_config, encoder_config) == expected


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({"max_position_embeddings": 4096,
          "rope_scaling": {"type": "dynamic", "factor": 2.0}}, 8192),
        ({"max_position_embeddings": 2048,
          "rope_scaling": {"rope_type": "linear", "factor": 4}}, 8192),
        (  # longrope limits are already the long ones
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"type": "longrope", "factor": 32,
                                 "original_max_position_embeddings": 4096},
            },
            131072,
        ),
        ({"n_positions": 1024}, 1024),  # GPT-2
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048),  # the smallest key
        ({"max_position_embeddings": 8192, "model_max_length": 131072}, 131072),  # Command-R
        ({}, 2048),  # no key at all: vLLM's default
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "mrope"}}, 4096),
        (  # transformers v5: RoPE parameters per layer type; the full-attention ones count
            {
                "max_position_embeddings": 131072,
                "rope_parameters": {
                    "full_attention": {"rope_type": "yarn", "factor": 8.0,
                                       "original_max_position_embeddings": 32768},
                    "sliding_attention": {"rope_type": "default"},
                },
            },
            262144,
        ),
    ],
)  # fmt: skip
def test_max_context_rules(cfg, expected):
    assert max_context(cfg) == expected


def test_tokenizer_limit_applies_before_rope_scaling():
    # DeepSeek-V3: min(163840, 131072) = 131072, then yarn sets 4096 x 40 = 163840 anyway.
    cfg = config("deepseek-ai/DeepSeek-V3")
    assert max_context(cfg, {"model_max_length": 131072}) == 163840
    assert max_context(cfg) == 163840


@pytest.mark.parametrize(
    ("repo", "tokens", "concurrency", "expected"),
    [
        # 128 KiB x 131072 tokens = 16 GiB
        ("meta-llama/Llama-3.1-8B-Instruct", 131072, 1, 16 * GiB),
        # 4 requests of 8192 tokens: 4 x 8192 x 128 KiB = 4 GiB
        ("meta-llama/Llama-3.1-8B-Instruct", 8192, 4, 4 * GiB),
        # Qwen2 carries sliding_window 131072 but use_sliding_window false: 57344 x 32768
        ("Qwen/Qwen2.5-7B-Instruct", 32768, 1, 1_879_048_192),
        # 62 layers, every 6th global: 10 global x 131072 + 52 x 1024 window, 8192 B per layer
        # token (2 x 16 x 128 x 2) -> 8192 x 1_363_968
        ("google/gemma-3-27b-it", 131072, 1, 11_173_625_856),
        # layer_types: 12 full x 131072 + 12 sliding x 128, 2048 B per layer token
        ("openai/gpt-oss-20b", 131072, 1, 3_224_371_200),
        # MLA, nothing to slide: 70272 x 163840
        ("deepseek-ai/DeepSeek-V3", 163840, 1, 11_513_364_480),
        # 32 decoder layers x (448 own + 1500 encoder positions) x 5120 B
        ("openai/whisper-large-v3", 448, 1, 319_160_320),
        ("BAAI/bge-m3", 8192, 8, 0),
    ],
)
def test_kv_cache_bytes(repo, tokens, concurrency, expected):
    assert kv_cache_bytes(model_shape(config(repo)), tokens, concurrency) == expected


def test_sliding_window_on_every_layer():
    # Mistral-7B-v0.1 style: 32 layers all within a 4096 window; 2 x 8 x 128 x 2 = 4096 B per
    # layer token -> 32 x 4096 x 4096 at any context past the window.
    cfg = {
        "model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "sliding_window": 4096,
    }  # fmt: skip
    shape = model_shape(cfg)
    assert (shape.sliding_window, shape.sliding_layers) == (4096, 32)
    assert kv_cache_bytes(shape, 32768) == 536_870_912
    assert kv_cache_bytes(shape, 1000) == 32 * 1000 * 4096  # below the window: every token


def test_falcon_multi_query_has_one_kv_head():
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
           "num_hidden_layers": 32, "multi_query": True}  # fmt: skip
    shape = model_shape(cfg)
    assert (shape.kv_heads, shape.head_dim) == (1, 64)
    assert kv_bytes_per_token(shape) == 2 * 32 * 1 * 64 * 2


# ---- weights ----

AWQ = {"I32": 822_033_408, "F16": 1_141_306_880}  # Qwen2.5-7B-Instruct-AWQ's headers
DEEPSEEK = {"BF16": 3_918_786_560, "F8_E4M3": 680_571_043_840, "F32": 41_555_600}
GPT_OSS = {"BF16": 1_804_459_584, "U8": 10_152_345_600}


def test_awq_weights_count_packed_ints_and_scales_as_stored():
    cfg = config("Qwen/Qwen2.5-7B-Instruct-AWQ")
    weights = weights_from_safetensors(AWQ, cfg)
    # 822_033_408 x 4 B + 1_141_306_880 x 2 B
    assert weights.stored_bytes == 5_570_747_392
    assert weights.gpu_bytes == weights.stored_bytes  # loaded as stored
    assert weights.dtype == "awq int4"
    # int32 = out x (128 + 1) / 8 per group of 128: 822_033_408 x 8 x 128 / 129 = 6_525_288_448
    # weights, minus 1/128 of that in F16 scales: within a few hundred of the 7_615_616_512
    # parameters of the unquantised model.
    assert abs(weights.parameters - 7_615_616_512) < 1_000


def test_fp8_weights():
    weights = weights_from_safetensors(DEEPSEEK, config("deepseek-ai/DeepSeek-V3"))
    # 3_918_786_560 x 2 + 680_571_043_840 x 1 + 41_555_600 x 4
    assert weights.stored_bytes == 688_574_839_360
    assert weights.parameters == 684_531_386_000
    assert weights.dtype == "fp8"


def test_mxfp4_weights():
    weights = weights_from_safetensors(GPT_OSS, config("openai/gpt-oss-20b"))
    assert weights.stored_bytes == 1_804_459_584 * 2 + 10_152_345_600
    # 17 stored bytes (16 of blocks, 1 scale) per 32 values: 10_152_345_600 x 32 / 17
    assert weights.parameters == 1_804_459_584 + 19_110_297_600
    assert weights.dtype == "mxfp4"


def test_float32_checkpoint_runs_in_16_bits():
    weights = weights_from_safetensors({"F32": 567_755_777}, config("BAAI/bge-reranker-v2-m3"))
    assert weights.stored_bytes == 567_755_777 * 4
    assert weights.gpu_bytes == 567_755_777 * 2
    assert weights.dtype == "float32"


def test_weights_from_file_sizes_use_the_config_dtype():
    weights = weights_from_file_bytes(2_271_145_830, config("BAAI/bge-m3"))  # float32 .bin
    assert weights.parameters == 2_271_145_830 // 4
    assert weights.gpu_bytes == weights.parameters * 2
    half = weights_from_file_bytes(1000, {"torch_dtype": "bfloat16"})
    assert (half.parameters, half.gpu_bytes) == (500, 1000)


@pytest.mark.parametrize(
    ("counts", "quant", "expected"),
    [
        ({"BF16": 100}, {}, "bfloat16"),
        ({"F32": 10, "BF16": 100}, {}, "bfloat16"),  # norms in float32 do not decide
        ({"F16": 5}, {}, "float16"),
        ({"I32": 5, "F16": 5}, {"quant_method": "gptq", "bits": 4}, "gptq int4"),
        ({"I32": 5, "F16": 5}, {"quant_method": "awq", "w_bit": 4}, "awq int4"),
        ({"F8_E4M3": 5}, {"quant_method": "fp8"}, "fp8"),
        ({}, {}, "unknown"),
    ],
)
def test_weight_dtype(counts, quant, expected):
    assert weight_dtype(counts, quant) == expected


def test_unquantised_parameters_are_the_element_count():
    assert logical_parameters({"BF16": 7, "F32": 3}, {}) == 10
    assert stored_bytes({"BF16": 7, "F32": 3, "F4": 3}) == 14 + 12 + 2  # F4 packs two a byte


# ---- quantities ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [("23034Mi", 23034 * 2**20), ("8Gi", 8 * 2**30), ("1.5G", 1_500_000_000), ("100", 100),
     (1024, 1024), ("2Ti", 2 * 2**40)],
)  # fmt: skip
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["8 GB", "", "Gi", "-1Gi"])
def test_parse_bytes_refuses_what_is_not_a_quantity(text):
    with pytest.raises(ValueError, match="not a memory quantity"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("disk", "expected"),
    [
        (16_060_617_592, "17Gi"),  # x 1.1 = 16.45 GiB, rounded up
        (10 * GiB, "11Gi"),  # exactly 10 GiB still gets its 10 %
        (1, "1Gi"),
    ],
)
def test_cache_size(disk, expected):
    assert cache_size(disk) == expected


# ---- fitting the catalog ----

LLAMA_8B_WEIGHTS = 8_030_261_248 * 2  # bfloat16
DEEPSEEK_WEIGHTS = 688_574_839_360


def llama_8b_demand(context: int, concurrency: int = 1) -> Demand:
    shape = model_shape(config("meta-llama/Llama-3.1-8B-Instruct"))
    return Demand(LLAMA_8B_WEIGHTS, kv_cache_bytes(shape, context, concurrency), shape, 0.9)


def test_per_gpu_memory_of_llama_8b():
    demand = llama_8b_demand(131072)
    # overhead: 1 GiB + 8192 tokens x 4096 hidden x 32 B = 2 GiB
    # one GPU: (16_060_522_496 + 17_179_869_184 + 2_147_483_648) / 0.9, rounded up
    assert demand.needed_per_gpu(1, 1) == 39_319_861_476
    # two GPUs split weights and the 8 KV heads: (8_030_261_248 + 8_589_934_592 + 2 GiB) / 0.9
    assert demand.needed_per_gpu(2, 1) == 20_852_977_209


def test_mla_latent_cache_is_whole_on_every_gpu():
    shape = model_shape(config("deepseek-ai/DeepSeek-V3"))
    demand = Demand(DEEPSEEK_WEIGHTS, kv_cache_bytes(shape, 163840), shape, 0.9)
    # 8 GPUs: 688_574_839_360 / 8 + 11_513_364_480 (not split: one latent head)
    # + 1 GiB + 8192 x 7168 x 32 = 100_538_009_416, over 0.9
    assert demand.needed_per_gpu(8, 1) == 111_708_899_352
    # two nodes of 8 halve the layers, so weights and cache: 51_745_399_716 / 0.9
    assert demand.needed_per_gpu(8, 2) == 57_494_888_574


@pytest.mark.parametrize(
    ("tokens", "kind", "gpus", "nodes"),
    [
        # one GPU needs 39.3e9 B: the a100-40gb (42.9e9) is the smallest that holds it
        (131072, "a100-40gb", 1, 1),
        # 8192 tokens: (16.06e9 + 1 GiB + 2 GiB) / 0.9 = 21.4e9 B; the a10g (23028Mi) is the
        # smallest single GPU, 6 MiB smaller than the l4
        (8192, "a10g", 1, 1),
    ],
)
def test_smallest_fit_for_llama_8b(tokens, kind, gpus, nodes):
    result = size_on_catalog(llama_8b_demand(tokens), DEFAULT_MACHINE_CATALOG, nvidia_only=True)
    best = result.suggestion
    assert (best.gpu_kind, best.gpus_per_replica, best.nodes_per_replica) == (kind, gpus, nodes)
    assert result.unfit == []  # every kind holds it with enough GPUs
    t4 = next(option for option in result.options if option.gpu_kind == "t4")
    assert t4.gpus_per_replica > 1


def test_each_kind_gets_its_smallest_layout_for_deepseek_v3():
    shape = model_shape(config("deepseek-ai/DeepSeek-V3"))
    demand = Demand(DEEPSEEK_WEIGHTS, kv_cache_bytes(shape, 163840), shape, 0.9)
    result = size_on_catalog(demand, DEFAULT_MACHINE_CATALOG, nvidia_only=True)
    layouts = {o.gpu_kind: (o.gpus_per_replica, o.nodes_per_replica) for o in result.options}
    assert layouts["h200"] == (8, 1)  # 111.7e9 B per GPU of 150.8e9
    assert layouts["b200"] == (8, 1)
    assert layouts["h100"] == (8, 2)  # 57.5e9 B per GPU of 85.5e9
    # fewest nodes, then fewest GPUs, then the smaller GPU: h200 before b200
    assert result.suggestion.gpu_kind == "h200"


def test_tensor_parallel_sizes_divide_the_heads():
    qwen = model_shape(config("Qwen/Qwen2.5-7B-Instruct"))  # 28 heads, 4 KV heads
    assert sizing._tensor_parallel_sizes(qwen, 8) == [1, 2, 4]
    llama = model_shape(config("meta-llama/Llama-3.1-8B-Instruct"))
    assert sizing._tensor_parallel_sizes(llama, 4) == [1, 2, 4]  # a t4 node has 4 GPUs
    assert sizing._layouts(qwen, 8)[3] == (4, 2)  # past one node: whole nodes of 4


def test_too_large_for_64_gpus():
    shape = model_shape(config("acme/colossus-12t"))
    demand = Demand(24 * 10**12, 0, shape, 0.9)  # 24 TB of weights
    result = size_on_catalog(demand, DEFAULT_MACHINE_CATALOG, nvidia_only=True)
    assert result.suggestion is None and result.options == []
    reasons = dict(result.unfit)
    assert set(reasons) == {kind["name"] for kind in DEFAULT_MACHINE_CATALOG}
    assert "8 GPUs on each of 8 nodes" in reasons["b200"]
    assert "4 GPUs on each of 16 nodes" in reasons["t4"]
    assert fit_kind(demand, DEFAULT_MACHINE_CATALOG[-1]) == reasons["b200"]


def test_other_vendors_are_unfit_for_vllm():
    amd = dict(DEFAULT_MACHINE_CATALOG[-1], name="mi300x", vendor="amd", gpuMemory="196608Mi")
    result = size_on_catalog(llama_8b_demand(8192), [amd], nvidia_only=True)
    assert result.suggestion is None
    assert result.unfit == [("mi300x", "the vLLM runtime runs on NVIDIA GPUs only")]


def test_longest_context_that_fits():
    # 1024 requests of Llama-3.1-8B: on 64 b200 (8 x 8), each GPU holds 1/64 of the weights and
    # of the cache: (250_945_664 + kv / 64 + 2 GiB) / 0.9 <= 192_265_846_784
    # -> kv <= 64 x 170_640_832_793.6 -> tokens <= that / (131072 x 1024) = 81_367.6
    demand = llama_8b_demand(131072, concurrency=1024)
    assert size_on_catalog(demand, DEFAULT_MACHINE_CATALOG, nvidia_only=True).suggestion is None
    assert max_context_that_fits(demand, DEFAULT_MACHINE_CATALOG, 1024, 131071) == 81_367


def test_default_catalog_matches_the_machine_catalog_format():
    names = [kind["name"] for kind in DEFAULT_MACHINE_CATALOG]
    assert names == ["t4", "l4", "a10g", "l40s", "a100-40gb", "a100-80gb", "h100", "h200", "b200"]
    for kind in DEFAULT_MACHINE_CATALOG:
        assert set(kind) == {"name", "vendor", "gpuMemory", "gpusPerNode", "nodeCpu", "nodeMemory",
                             "nodeLabels"}  # fmt: skip
        assert kind["nodeLabels"]["nvidia.com/gpu.product"]
        parse_bytes(kind["gpuMemory"])
        parse_bytes(kind["nodeMemory"])
    assert DEFAULT_MACHINE_CATALOG[0]["gpusPerNode"] == 4


@pytest.mark.parametrize(
    ("parameters", "stored", "served", "held"),
    [
        (1000, "bfloat16", "float32", 4000),  # auto without bfloat16 instructions
        (1000, "float16", "float32", 4000),
        (1000, "float32", "float32", 4000),
        (1000, "float32", "bfloat16", 2000),  # asked for: cast down
        (1000, "bfloat16", "auto", None),  # vLLM's own choice: as stored
        (1000, "bfloat16", None, None),
        (1000, "awq int4", "float32", None),  # quantised: its kernels keep their own format
        (None, "bfloat16", "float32", None),  # parameters unknown
    ],
)
def test_the_weights_take_the_bytes_of_the_dtype_they_are_served_in(
    parameters, stored, served, held
):
    assert sizing.weight_bytes_in(parameters, stored, served) == held
