"""Tensor names and shapes of well-known checkpoints, generated from their config.json, so the
fake Hub serves safetensors headers like the real files (the data is never materialised).

Each layout returns [(name, dtype, shape)]; Linear weights are [out_features, in_features].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

Tensor = tuple[str, str, list[int]]


def _dims(cfg: Mapping) -> tuple[int, int, int, int, int]:
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    return hidden, heads, cfg.get("num_key_value_heads", heads), head_dim, cfg["num_hidden_layers"]


def _attention(p: str, cfg: Mapping, dtype: str, *, bias: bool, qk_norm: bool) -> Iterator[Tensor]:
    hidden, heads, kv, hd, _ = _dims(cfg)
    yield f"{p}self_attn.q_proj.weight", dtype, [heads * hd, hidden]
    yield f"{p}self_attn.k_proj.weight", dtype, [kv * hd, hidden]
    yield f"{p}self_attn.v_proj.weight", dtype, [kv * hd, hidden]
    yield f"{p}self_attn.o_proj.weight", dtype, [hidden, heads * hd]
    if bias:
        yield f"{p}self_attn.q_proj.bias", dtype, [heads * hd]
        yield f"{p}self_attn.k_proj.bias", dtype, [kv * hd]
        yield f"{p}self_attn.v_proj.bias", dtype, [kv * hd]
    if qk_norm:
        yield f"{p}self_attn.q_norm.weight", dtype, [hd]
        yield f"{p}self_attn.k_norm.weight", dtype, [hd]


def _mlp(p: str, hidden: int, inter: int, dtype: str) -> Iterator[Tensor]:
    yield f"{p}gate_proj.weight", dtype, [inter, hidden]
    yield f"{p}up_proj.weight", dtype, [inter, hidden]
    yield f"{p}down_proj.weight", dtype, [hidden, inter]


def _decoder(cfg: Mapping, dtype: str, prefix: str, mlp: Callable, **attn) -> Iterator[Tensor]:
    hidden, *_, layers = _dims(cfg)
    yield f"{prefix}embed_tokens.weight", dtype, [cfg["vocab_size"], hidden]
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        yield f"{p}input_layernorm.weight", dtype, [hidden]
        yield f"{p}post_attention_layernorm.weight", dtype, [hidden]
        yield from _attention(p, cfg, dtype, **attn)
        yield from mlp(p, cfg, dtype)
    yield f"{prefix}norm.weight", dtype, [hidden]
    if not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", dtype, [cfg["vocab_size"], hidden]


def _dense_mlp(p: str, cfg: Mapping, dtype: str) -> Iterator[Tensor]:
    yield from _mlp(f"{p}mlp.", cfg["hidden_size"], cfg["intermediate_size"], dtype)


def llama(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    """Llama, Mistral; Qwen2 adds q/k/v biases (attention_bias or model_type qwen2)."""
    bias = bool(cfg.get("attention_bias")) or cfg.get("model_type") == "qwen2"
    return list(_decoder(cfg, dtype, "model.", _dense_mlp, bias=bias, qk_norm=False))


def qwen3_moe(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    def mlp(p: str, cfg: Mapping, dtype: str) -> Iterator[Tensor]:
        yield f"{p}mlp.gate.weight", dtype, [cfg["num_experts"], cfg["hidden_size"]]
        for e in range(cfg["num_experts"]):
            yield from _mlp(
                f"{p}mlp.experts.{e}.", cfg["hidden_size"], cfg["moe_intermediate_size"], dtype
            )

    return list(_decoder(cfg, dtype, "model.", mlp, bias=False, qk_norm=True))


def mixtral(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    def mlp(p: str, cfg: Mapping, dtype: str) -> Iterator[Tensor]:
        hidden, inter, experts = (
            cfg["hidden_size"],
            cfg["intermediate_size"],
            cfg["num_local_experts"],
        )
        yield f"{p}block_sparse_moe.gate.weight", dtype, [experts, hidden]
        for e in range(experts):
            q = f"{p}block_sparse_moe.experts.{e}."
            yield f"{q}w1.weight", dtype, [inter, hidden]
            yield f"{q}w2.weight", dtype, [hidden, inter]
            yield f"{q}w3.weight", dtype, [inter, hidden]

    return list(_decoder(cfg, dtype, "model.", mlp, bias=False, qk_norm=False))


def mistral_consolidated(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    """The same weights under Mistral's own names (consolidated.safetensors)."""
    hidden, heads, kv, hd, layers = _dims(cfg)
    inter = cfg["intermediate_size"]
    out = [("tok_embeddings.weight", dtype, [cfg["vocab_size"], hidden])]
    for i in range(layers):
        p = f"layers.{i}."
        out += [
            (f"{p}attention.wq.weight", dtype, [heads * hd, hidden]),
            (f"{p}attention.wk.weight", dtype, [kv * hd, hidden]),
            (f"{p}attention.wv.weight", dtype, [kv * hd, hidden]),
            (f"{p}attention.wo.weight", dtype, [hidden, heads * hd]),
            (f"{p}feed_forward.w1.weight", dtype, [inter, hidden]),
            (f"{p}feed_forward.w2.weight", dtype, [hidden, inter]),
            (f"{p}feed_forward.w3.weight", dtype, [inter, hidden]),
            (f"{p}attention_norm.weight", dtype, [hidden]),
            (f"{p}ffn_norm.weight", dtype, [hidden]),
        ]
    return out + [
        ("norm.weight", dtype, [hidden]),
        ("output.weight", dtype, [cfg["vocab_size"], hidden]),
    ]


def awq(cfg: Mapping, dtype: str = "F16") -> list[Tensor]:
    """A Qwen2/Llama checkpoint quantised by AutoAWQ (GEMM): int4 packed 8 per int32."""
    quant = cfg["quantization_config"]
    group, pack = quant["group_size"], 32 // quant["bits"]
    out: list[Tensor] = []
    for name, tensor_dtype, shape in llama(cfg, dtype):
        projection = name.endswith("_proj.weight") and ".layers." in name
        if not projection:
            out.append((name, tensor_dtype, shape))
            continue
        rows, cols = shape  # out_features, in_features
        stem = name.removesuffix(".weight")
        out += [
            (f"{stem}.qweight", "I32", [cols, rows // pack]),
            (f"{stem}.qzeros", "I32", [cols // group, rows // pack]),
            (f"{stem}.scales", dtype, [cols // group, rows]),
        ]
    return out


def gemma3(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    """Gemma 3 with its SigLIP vision tower and projector."""
    text = dict(cfg["text_config"])
    text.setdefault("vocab_size", 262208)
    text["tie_word_embeddings"] = True

    def mlp(p: str, cfg: Mapping, dtype: str) -> Iterator[Tensor]:
        yield f"{p}pre_feedforward_layernorm.weight", dtype, [cfg["hidden_size"]]
        yield f"{p}post_feedforward_layernorm.weight", dtype, [cfg["hidden_size"]]
        yield from _dense_mlp(p, cfg, dtype)

    out = list(_decoder(text, dtype, "language_model.model.", mlp, bias=False, qk_norm=True))
    vision = cfg["vision_config"]
    out += list(_siglip(vision, dtype, "vision_tower.vision_model."))
    out += [
        (
            "multi_modal_projector.mm_input_projection_weight",
            dtype,
            [vision["hidden_size"], text["hidden_size"]],
        ),
        ("multi_modal_projector.mm_soft_emb_norm.weight", dtype, [vision["hidden_size"]]),
    ]
    return out


def _siglip(vision: Mapping, dtype: str, prefix: str) -> Iterator[Tensor]:
    hidden, inter = vision["hidden_size"], vision["intermediate_size"]
    patch, image = vision["patch_size"], vision["image_size"]
    yield f"{prefix}embeddings.patch_embedding.weight", dtype, [hidden, 3, patch, patch]
    yield f"{prefix}embeddings.patch_embedding.bias", dtype, [hidden]
    yield f"{prefix}embeddings.position_embedding.weight", dtype, [(image // patch) ** 2, hidden]
    for i in range(vision["num_hidden_layers"]):
        p = f"{prefix}encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            yield f"{p}self_attn.{proj}.weight", dtype, [hidden, hidden]
            yield f"{p}self_attn.{proj}.bias", dtype, [hidden]
        for norm in ("layer_norm1", "layer_norm2"):
            yield f"{p}{norm}.weight", dtype, [hidden]
            yield f"{p}{norm}.bias", dtype, [hidden]
        yield f"{p}mlp.fc1.weight", dtype, [inter, hidden]
        yield f"{p}mlp.fc1.bias", dtype, [inter]
        yield f"{p}mlp.fc2.weight", dtype, [hidden, inter]
        yield f"{p}mlp.fc2.bias", dtype, [hidden]
    yield f"{prefix}post_layernorm.weight", dtype, [hidden]
    yield f"{prefix}post_layernorm.bias", dtype, [hidden]


def _fp8_linear(name: str, rows: int, cols: int, block: int = 128) -> list[Tensor]:
    return [
        (f"{name}.weight", "F8_E4M3", [rows, cols]),
        (f"{name}.weight_scale_inv", "F32", [math.ceil(rows / block), math.ceil(cols / block)]),
    ]


def deepseek_v3(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    """DeepSeek-V3: MLA attention, 3 dense then MoE layers, FP8 block-quantised linears with
    float32 inverse scales, and one multi-token-prediction layer stored after the last."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, v_dim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    q_rank, kv_rank = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    vocab, experts, moe_inter = (
        cfg["vocab_size"],
        cfg["n_routed_experts"],
        cfg["moe_intermediate_size"],
    )
    out: list[Tensor] = [("model.embed_tokens.weight", dtype, [vocab, hidden])]
    mtp = cfg.get("num_nextn_predict_layers", 0)
    for i in range(cfg["num_hidden_layers"] + mtp):
        p = f"model.layers.{i}."
        if i >= cfg["num_hidden_layers"]:  # the multi-token-prediction layer's extras
            out += [
                (f"{p}embed_tokens.weight", dtype, [vocab, hidden]),
                (f"{p}enorm.weight", dtype, [hidden]),
                (f"{p}hnorm.weight", dtype, [hidden]),
                (f"{p}eh_proj.weight", dtype, [hidden, 2 * hidden]),
                (f"{p}shared_head.norm.weight", dtype, [hidden]),
                (f"{p}shared_head.head.weight", dtype, [vocab, hidden]),
            ]
        out += [
            (f"{p}input_layernorm.weight", dtype, [hidden]),
            (f"{p}post_attention_layernorm.weight", dtype, [hidden]),
            (f"{p}self_attn.q_a_layernorm.weight", dtype, [q_rank]),
            (f"{p}self_attn.kv_a_layernorm.weight", dtype, [kv_rank]),
        ]
        out += _fp8_linear(f"{p}self_attn.q_a_proj", q_rank, hidden)
        out += _fp8_linear(f"{p}self_attn.q_b_proj", heads * (nope + rope), q_rank)
        out += _fp8_linear(f"{p}self_attn.kv_a_proj_with_mqa", kv_rank + rope, hidden)
        out += _fp8_linear(f"{p}self_attn.kv_b_proj", heads * (nope + v_dim), kv_rank)
        out += _fp8_linear(f"{p}self_attn.o_proj", hidden, heads * v_dim)
        if i < cfg["first_k_dense_replace"]:
            out += _fp8_mlp(f"{p}mlp.", hidden, cfg["intermediate_size"])
            continue
        out += [
            (f"{p}mlp.gate.weight", dtype, [experts, hidden]),
            (f"{p}mlp.gate.e_score_correction_bias", "F32", [experts]),
        ]
        for e in range(experts):
            out += _fp8_mlp(f"{p}mlp.experts.{e}.", hidden, moe_inter)
        out += _fp8_mlp(f"{p}mlp.shared_experts.", hidden, moe_inter * cfg["n_shared_experts"])
    out += [("model.norm.weight", dtype, [hidden]), ("lm_head.weight", dtype, [vocab, hidden])]
    return out


def _fp8_mlp(p: str, hidden: int, inter: int) -> list[Tensor]:
    return (
        _fp8_linear(f"{p}gate_proj", inter, hidden)
        + _fp8_linear(f"{p}up_proj", inter, hidden)
        + _fp8_linear(f"{p}down_proj", hidden, inter)
    )


def gpt_oss(cfg: Mapping, dtype: str = "BF16") -> list[Tensor]:
    """gpt-oss: attention with sinks in BF16, experts in MXFP4 (16 bytes of blocks and one
    scale byte per 32 values)."""
    hidden, heads, kv, hd, layers = _dims(cfg)
    experts, inter = cfg["num_local_experts"], cfg["intermediate_size"]
    out: list[Tensor] = [("model.embed_tokens.weight", dtype, [cfg["vocab_size"], hidden])]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (f"{p}input_layernorm.weight", dtype, [hidden]),
            (f"{p}post_attention_layernorm.weight", dtype, [hidden]),
            (f"{p}self_attn.sinks", dtype, [heads]),
            (f"{p}self_attn.o_proj.bias", dtype, [hidden]),
            (f"{p}mlp.router.weight", dtype, [experts, hidden]),
            (f"{p}mlp.router.bias", dtype, [experts]),
            (f"{p}mlp.experts.gate_up_proj_blocks", "U8", [experts, 2 * inter, hidden // 32, 16]),
            (f"{p}mlp.experts.gate_up_proj_scales", "U8", [experts, 2 * inter, hidden // 32]),
            (f"{p}mlp.experts.gate_up_proj_bias", dtype, [experts, 2 * inter]),
            (f"{p}mlp.experts.down_proj_blocks", "U8", [experts, hidden, inter // 32, 16]),
            (f"{p}mlp.experts.down_proj_scales", "U8", [experts, hidden, inter // 32]),
            (f"{p}mlp.experts.down_proj_bias", dtype, [experts, hidden]),
        ]
        out += list(_attention(p, cfg, dtype, bias=True, qk_norm=False))
    out += [
        ("model.norm.weight", dtype, [hidden]),
        ("lm_head.weight", dtype, [cfg["vocab_size"], hidden]),
    ]
    return out


def xlm_roberta(cfg: Mapping, dtype: str = "F32") -> list[Tensor]:
    """XLM-RoBERTa; a ForSequenceClassification head puts it under `roberta.`."""
    classifier = any(arch.endswith("ForSequenceClassification") for arch in cfg["architectures"])
    prefix = "roberta." if classifier else ""
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    out: list[Tensor] = [
        (f"{prefix}embeddings.word_embeddings.weight", dtype, [cfg["vocab_size"], hidden]),
        (
            f"{prefix}embeddings.position_embeddings.weight",
            dtype,
            [cfg["max_position_embeddings"], hidden],
        ),
        (
            f"{prefix}embeddings.token_type_embeddings.weight",
            dtype,
            [cfg["type_vocab_size"], hidden],
        ),
        *_norm(f"{prefix}embeddings.LayerNorm", hidden, dtype),
    ]
    for i in range(cfg["num_hidden_layers"]):
        p = f"{prefix}encoder.layer.{i}."
        for proj in ("query", "key", "value"):
            out += _linear(f"{p}attention.self.{proj}", hidden, hidden, dtype)
        out += _linear(f"{p}attention.output.dense", hidden, hidden, dtype)
        out += _norm(f"{p}attention.output.LayerNorm", hidden, dtype)
        out += _linear(f"{p}intermediate.dense", inter, hidden, dtype)
        out += _linear(f"{p}output.dense", hidden, inter, dtype)
        out += _norm(f"{p}output.LayerNorm", hidden, dtype)
    if classifier:
        out += _linear("classifier.dense", hidden, hidden, dtype)
        out += _linear("classifier.out_proj", cfg.get("num_labels", 1), hidden, dtype)
    return out


def _linear(name: str, rows: int, cols: int, dtype: str, bias: bool = True) -> list[Tensor]:
    return [(f"{name}.weight", dtype, [rows, cols])] + (
        [(f"{name}.bias", dtype, [rows])] if bias else []
    )


def _norm(name: str, size: int, dtype: str) -> list[Tensor]:
    return [(f"{name}.weight", dtype, [size]), (f"{name}.bias", dtype, [size])]


def whisper(cfg: Mapping, dtype: str = "F16") -> list[Tensor]:
    d, ffn = cfg["d_model"], cfg["encoder_ffn_dim"]
    out: list[Tensor] = [
        ("model.encoder.conv1.weight", dtype, [d, cfg["num_mel_bins"], 3]),
        ("model.encoder.conv1.bias", dtype, [d]),
        ("model.encoder.conv2.weight", dtype, [d, d, 3]),
        ("model.encoder.conv2.bias", dtype, [d]),
        ("model.encoder.embed_positions.weight", dtype, [cfg["max_source_positions"], d]),
        ("model.decoder.embed_tokens.weight", dtype, [cfg["vocab_size"], d]),
        ("model.decoder.embed_positions.weight", dtype, [cfg["max_target_positions"], d]),
    ]
    for side, layers in (("encoder", cfg["encoder_layers"]), ("decoder", cfg["decoder_layers"])):
        attentions = ("self_attn",) if side == "encoder" else ("self_attn", "encoder_attn")
        for i in range(layers):
            p = f"model.{side}.layers.{i}."
            for attn in attentions:
                out += _linear(f"{p}{attn}.k_proj", d, d, dtype, bias=False)
                for proj in ("v_proj", "q_proj", "out_proj"):
                    out += _linear(f"{p}{attn}.{proj}", d, d, dtype)
                out += _norm(f"{p}{attn}_layer_norm", d, dtype)
            out += _linear(f"{p}fc1", ffn, d, dtype) + _linear(f"{p}fc2", d, ffn, dtype)
            out += _norm(f"{p}final_layer_norm", d, dtype)
        out += _norm(f"model.{side}.layer_norm", d, dtype)
    return out


LAYOUTS: dict[str, Callable[..., list[Tensor]]] = {
    "llama": llama,
    "qwen3_moe": qwen3_moe,
    "mixtral": mixtral,
    "mistral_consolidated": mistral_consolidated,
    "awq": awq,
    "gemma3": gemma3,
    "deepseek_v3": deepseek_v3,
    "gpt_oss": gpt_oss,
    "xlm_roberta": xlm_roberta,
    "whisper": whisper,
}
