"""Memory math for serving a model, from config.json and safetensors metadata alone: parameters,
weight bytes, the maximum context by vLLM's rules, KV cache, and the machines that hold it.

Constants (per GPU, on top of weights and KV cache), all inside gpuMemoryUtilization:
- NON_TORCH_BYTES: CUDA context, NCCL buffers and CUDA graphs, 1 GiB.
- activation peak: vLLM profiles one batch of ACTIVATION_TOKENS (8192) tokens; we count
  ACTIVATION_BYTES_PER_HIDDEN (32) bytes per token per hidden unit (1 GiB for hidden 4096).
A checkpoint stored in float32 runs in 16 bits (vLLM's dtype "auto" downcasts it); the KV cache
is 16-bit (kv_cache_dtype "auto").
On the CPU (a machine of the catalog without GPUs) a replica holds its weights and the runtime
(RUNTIME_BYTES) in three quarters of its memory: the KV cache defaults to the last quarter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction

from jobs.machine_catalog import cpu_machines, gpu_kinds
from jobs.manifest import parse_quantity
from jobs.manifest.model_defaults import cpu_replica_bytes

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

NON_TORCH_BYTES = GiB
ACTIVATION_TOKENS = 8192
ACTIVATION_BYTES_PER_HIDDEN = 32
KV_DTYPE_BYTES = 2
CACHE_HEADROOM = Fraction(11, 10)  # weight cache: 10 % over the files, rounded up to a Gi
MAX_GPUS = 64
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)

# ---- quantities ----


def parse_bytes(quantity: str | int) -> int:
    """Kubernetes quantity ("23034Mi", "8Gi", "1.5G", 1024) -> bytes, exactly, rounded up.

    jobs.manifest.parse_bytes refuses fractional bytes; the machine catalog accepts any
    quantity, so a fraction is rounded up to a whole byte, as Kubernetes' Quantity.Value() does.
    """
    try:
        amount = parse_quantity(quantity)
    except ValueError as exc:
        raise ValueError(f"{quantity!r} is not a memory quantity such as 16Gi or 23034Mi") from exc
    if amount < 0:
        raise ValueError(f"{quantity!r} is not a memory quantity such as 16Gi or 23034Mi")
    return math.ceil(amount)


BYTE_UNITS = ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"))


def human_bytes(n: int | None) -> str:
    """Bytes for people, the one format of every page: one decimal in the largest binary unit
    the amount reaches (12288 -> "12.0 KiB", 1.5 GiB -> "1.5 GiB"), whole bytes below 1 KiB.
    The unit is chosen after rounding, so 1023.96 MiB reads "1.0 GiB", not "1024.0 MiB"."""
    if n is None:
        return "unknown"
    for size, unit in BYTE_UNITS:
        if round(abs(n) / size, 1) >= 1:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def cache_size(disk_bytes: int) -> str:
    """The weight cache to reserve: the files plus 10 %, rounded up to a whole Gi."""
    return f"{max(1, math.ceil(disk_bytes * CACHE_HEADROOM / GiB))}Gi"


# ---- weights ----

DTYPE_BITS = {
    "F64": 64, "F32": 32, "F16": 16, "BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "I64": 64, "U64": 64, "I32": 32, "U32": 32,
    "I16": 16, "U16": 16, "I8": 8, "U8": 8, "BOOL": 8,
}  # fmt: skip
DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
CONFIG_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
PACKED_INT_METHODS = ("awq", "gptq", "awq_marlin", "gptq_marlin")


@dataclass(frozen=True)
class Weights:
    """What the checkpoint holds and what it takes on the GPU."""

    parameters: int  # logical parameters (packed 4-bit weights unpacked)
    stored_bytes: int  # tensor bytes as stored (packed ints, scales and all)
    dtype: str  # "bfloat16", "awq int4", "fp8", "mxfp4", ...
    gpu_bytes: int  # bytes once loaded (float32 checkpoints run in 16 bits)
    by_dtype: dict[str, int] = field(default_factory=dict)  # stored parameter count per dtype


def quantization(config: Mapping) -> dict:
    """The quantisation config (top level, compression_config, or the text config's), or {}."""
    for source in (config, config.get("text_config") or {}):
        quant = source.get("quantization_config") or source.get("compression_config")
        if quant:
            return dict(quant)
    return {}


def stored_bytes(by_dtype: Mapping[str, int]) -> int:
    return sum(math.ceil(count * DTYPE_BITS.get(dtype, 8) / 8) for dtype, count in by_dtype.items())


def logical_parameters(by_dtype: Mapping[str, int], quant: Mapping) -> int:
    """Parameters as the model card counts them, from stored element counts per dtype.

    AWQ/GPTQ pack `32 // bits` weights per int32 and store one zero-point int32 per `pack`
    outputs per group, plus one 16-bit scale per group: per group of g inputs the int32 count is
    out * (g + 1) / pack. MXFP4 stores 32 values in 16 bytes of blocks plus 1 byte of scale.
    """
    method = str(quant.get("quant_method", "")).lower()
    total = sum(by_dtype.values())
    bits = quant.get("bits") or quant.get("w_bit")
    if method in PACKED_INT_METHODS and bits and by_dtype.get("I32"):
        pack = 32 // int(bits)
        group = int(quant.get("group_size") or quant.get("q_group_size") or 128)
        group = group if group > 0 else 4096  # -1 means one group per channel
        packed = by_dtype["I32"]
        unpacked = packed * pack * group // (group + 1)
        scales = unpacked // group
        return total - packed + unpacked - scales
    if method == "mxfp4" and by_dtype.get("U8"):
        packed = by_dtype["U8"]
        return total - packed + packed * 32 // 17
    return total


def weight_dtype(by_dtype: Mapping[str, int], quant: Mapping) -> str:
    method = str(quant.get("quant_method", "")).lower()
    if method:
        bits = quant.get("bits") or quant.get("w_bit")
        return f"{method} int{bits}" if bits and method in PACKED_INT_METHODS else method
    if not by_dtype:
        return "unknown"
    main = max(by_dtype, key=lambda dtype: by_dtype[dtype] * DTYPE_BITS.get(dtype, 8))
    return DTYPE_NAMES.get(main, main.lower())


def weights_from_safetensors(by_dtype: Mapping[str, int], config: Mapping) -> Weights:
    """Weights from safetensors parameter counts per dtype (from the headers)."""
    quant = quantization(config)
    stored = stored_bytes(by_dtype)
    parameters = logical_parameters(by_dtype, quant)
    dtype = weight_dtype(by_dtype, quant)
    gpu = stored
    if not quant and by_dtype.get("F32"):
        # float32 tensors of an unquantised checkpoint load in 16 bits.
        gpu = stored - by_dtype["F32"] * 2
    return Weights(parameters, stored, dtype, gpu, dict(by_dtype))


def weights_from_file_bytes(file_bytes: int, config: Mapping) -> Weights:
    """Weights when only file sizes are known (PyTorch .bin, a NeMo archive): the config's dtype
    says how many bytes a parameter takes."""
    text = text_config(config)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or "")
    itemsize = CONFIG_DTYPE_BYTES.get(dtype, 4 if not dtype else 2)
    parameters = file_bytes // itemsize
    return Weights(parameters, file_bytes, dtype or "float32", parameters * min(itemsize, 2))


def weight_bytes_in(parameters: int | None, stored: str | None, served: str | None) -> int | None:
    """The bytes an unquantised checkpoint's `parameters` (stored in `stored`) take once served
    in `served`, when that is a dtype; None when it is not (the runtime's own choice, `auto`), the
    checkpoint is quantised, or the parameters are unknown."""
    if not parameters or stored not in CONFIG_DTYPE_BYTES or served not in CONFIG_DTYPE_BYTES:
        return None
    return parameters * CONFIG_DTYPE_BYTES[served]


# ---- the model's shape ----

# Keys a config.json leaves out when they equal the transformers class default.
MODEL_TYPE_DEFAULTS = {
    "gemma3_text": {"max_position_embeddings": 131072, "sliding_window": 4096,
                    "sliding_window_pattern": 6},
    "gemma2": {"max_position_embeddings": 8192, "sliding_window": 4096},
}  # fmt: skip
ENCODER_ONLY_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "modernbert", "nomic_bert", "distilbert", "electra",
     "deberta", "deberta-v2", "mpnet", "new", "gte"}
)  # fmt: skip
MLA_MODEL_TYPES = frozenset(
    {"deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "glm4_moe_lite", "kimi_k2",
     "kimi_linear", "longcat_flash", "pangu_ultra_moe"}
)  # fmt: skip


def text_config(config: Mapping) -> dict:
    """The language model's config: text_config for multimodal models, else the config itself,
    with the class defaults that config.json files leave out."""
    nested = (
        config.get("text_config")
        or (config.get("thinker_config") or {}).get("text_config")
        or config.get("llm_config")
        or config.get("language_config")
    )
    text = dict(nested) if isinstance(nested, Mapping) else dict(config)
    for key, value in MODEL_TYPE_DEFAULTS.get(text.get("model_type", ""), {}).items():
        text.setdefault(key, value)
    return text


def _first(source: Mapping, *keys: str, default=None):
    for key in keys:
        if source.get(key) is not None:
            return source[key]
    return default


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache and the tensor-parallel split depend on."""

    model_type: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    mla: bool = False  # DeepSeek-style latent attention: one latent per layer and token
    sliding_window: int | None = None
    sliding_layers: int = 0
    encoder_only: bool = False  # no KV cache at all
    cross_attention_tokens: int = 0  # encoder-decoder: encoder positions cached per request
    kv_dtype_bytes: int = KV_DTYPE_BYTES


def model_shape(config: Mapping) -> ModelShape:
    """The shape of the model described by a config.json, by vLLM's rules."""
    text = text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if model_type == "whisper":
        return _whisper_shape(text)
    heads = int(_first(text, "num_attention_heads", "n_head", "num_heads", "n_heads", default=0))
    hidden = int(_first(text, "hidden_size", "n_embd", "d_model", "dim", default=0))
    layers = int(_first(text, "num_hidden_layers", "n_layer", "num_layers", "n_layers", default=0))
    mla = model_type in MLA_MODEL_TYPES and text.get("kv_lora_rank") is not None
    if mla:
        head_dim = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        kv_heads = 1
    else:
        head_dim = int(_first(text, "head_dim", "hidden_size_per_head", default=0)) or (
            hidden // heads if heads else 0
        )
        kv_heads = _kv_heads(text, heads)
    window, sliding_layers = _sliding(text, model_type, layers)
    return ModelShape(
        model_type=model_type,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        mla=mla,
        sliding_window=window,
        sliding_layers=sliding_layers,
        encoder_only=model_type in ENCODER_ONLY_TYPES,
    )


def _whisper_shape(text: Mapping) -> ModelShape:
    heads = int(text["decoder_attention_heads"])
    hidden = int(text["d_model"])
    return ModelShape(
        model_type="whisper",
        layers=int(text["decoder_layers"]),
        attention_heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        hidden_size=hidden,
        cross_attention_tokens=int(text.get("max_source_positions") or 1500),
    )


def _kv_heads(text: Mapping, heads: int) -> int:
    if (
        text.get("model_type") == "falcon"
        and text.get("multi_query")
        and not text.get("new_decoder_architecture")
    ):
        return 1
    return int(
        _first(
            text,
            "n_head_kv",
            "num_kv_heads",
            "num_key_value_heads",
            "multi_query_group_num",
            default=heads,
        )
    )


def _sliding(text: Mapping, model_type: str, layers: int) -> tuple[int | None, int]:
    """(window, layers that use it). Qwen2-style configs carry a window they do not use."""
    window = text.get("sliding_window")
    if not isinstance(window, int) or window <= 0 or text.get("use_sliding_window") is False:
        return None, 0
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return window, sum(1 for kind in layer_types[:layers] if kind == "sliding_attention")
    pattern = text.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, layers - layers // pattern  # every pattern-th layer is global
    if model_type == "gemma2":
        return window, (layers + 1) // 2  # even layers slide
    return window, layers


# ---- context and KV cache ----

POSITION_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip
DEFAULT_MAX_CONTEXT = 2048
UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3")


def _rope(text: Mapping) -> dict | None:
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if not isinstance(rope, Mapping):
        return None
    if rope and all(isinstance(value, Mapping) for value in rope.values()):
        rope = rope.get("full_attention") or next(iter(rope.values()))  # per layer type
    return dict(rope)


def max_context(
    config: Mapping,
    tokenizer_config: Mapping | None = None,
    encoder_config: Mapping | None = None,
) -> int:
    """The model's maximum context in tokens, as vLLM derives its default max_model_len.

    The smallest of the position keys; model_max_length in config.json wins; the tokenizer's
    model_max_length caps it; RoPE scaling multiplies it (yarn from its original length; not for
    llama3/longrope types, nor gemma3 whose limit is already scaled); a Sentence-Transformers
    max_seq_length replaces it.
    """
    text = text_config(config)
    lengths = [text[key] for key in POSITION_KEYS if isinstance(text.get(key), (int, float))]
    derived: float = min(lengths) if lengths else math.inf
    if isinstance(text.get("model_max_length"), (int, float)) and text["model_max_length"]:
        derived = text["model_max_length"]
    tokenizer_limit = (tokenizer_config or {}).get("model_max_length")
    if isinstance(tokenizer_limit, (int, float)):
        derived = min(derived, tokenizer_limit)
    if derived == math.inf:
        derived = DEFAULT_MAX_CONTEXT
    rope = _rope(text)
    model_types = f"{config.get('model_type', '')} {text.get('model_type', '')}"
    if rope and "gemma3" not in model_types:
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type not in UNSCALED_ROPE_TYPES:
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = rope["original_max_position_embeddings"]
            derived *= rope.get("factor") or 1.0
    if encoder_config and isinstance(encoder_config.get("max_seq_length"), int):
        derived = encoder_config["max_seq_length"]
    return int(derived)


def kv_bytes_per_layer_token(shape: ModelShape) -> int:
    if shape.encoder_only:
        return 0
    if shape.mla:
        return shape.head_dim * shape.kv_dtype_bytes  # one latent (kv_lora_rank + rope dims)
    return 2 * shape.kv_heads * shape.head_dim * shape.kv_dtype_bytes  # K and V


def kv_bytes_per_token(shape: ModelShape) -> int:
    """KV cache bytes one token takes across every layer (sliding windows not applied):
    2 x layers x kv_heads x head_dim x dtype bytes, or layers x latent x dtype bytes for MLA."""
    return shape.layers * kv_bytes_per_layer_token(shape)


def kv_cache_bytes(shape: ModelShape, context_tokens: int, concurrency: int = 1) -> int:
    """KV cache for `concurrency` requests of `context_tokens` each; sliding-window layers keep
    at most their window, an encoder-decoder also caches the encoder's positions."""
    per_layer = kv_bytes_per_layer_token(shape)
    window_tokens = min(context_tokens, shape.sliding_window or context_tokens)
    full_layers = shape.layers - shape.sliding_layers
    per_request = per_layer * (
        full_layers * context_tokens
        + shape.sliding_layers * window_tokens
        + shape.layers * shape.cross_attention_tokens
    )
    return per_request * concurrency


# ---- fitting a catalog ----


def overhead_per_gpu(shape: ModelShape | None) -> int:
    hidden = shape.hidden_size if shape else 4096
    return NON_TORCH_BYTES + ACTIVATION_TOKENS * hidden * ACTIVATION_BYTES_PER_HIDDEN


@dataclass(frozen=True)
class Demand:
    """What one replica must hold, before it is split over GPUs."""

    weight_bytes: int  # on the GPU
    kv_bytes: int  # at the chosen context and concurrency
    shape: ModelShape | None
    gpu_memory_utilization: float

    def per_gpu(self, tensor_parallel: int, nodes: int) -> int:
        """GPU memory each device needs (before dividing by utilisation: see needed_per_gpu)."""
        kv = self.kv_bytes
        if self.shape and self.shape.kv_heads:
            # Each GPU holds its share of the KV heads; fewer heads than GPUs are replicated.
            kv = kv * max(1, self.shape.kv_heads // tensor_parallel) // self.shape.kv_heads
        split = tensor_parallel * nodes
        return self.weight_bytes // split + kv // nodes + overhead_per_gpu(self.shape)

    def needed_per_gpu(self, tensor_parallel: int = 1, nodes: int = 1) -> int:
        """Device memory a GPU must have: its share divided by gpuMemoryUtilization."""
        return math.ceil(
            Fraction(self.per_gpu(tensor_parallel, nodes))
            / Fraction(self.gpu_memory_utilization).limit_denominator(1000)
        )


@dataclass(frozen=True)
class Suggestion:
    """Where one replica runs: a GPU kind with GPUs per node and nodes, or CPU."""

    accelerator: str  # "gpu" | "cpu"
    gpu_kind: str | None = None
    gpus_per_replica: int = 0  # per node; the tensor-parallel size
    nodes_per_replica: int = 1  # the pipeline-parallel size
    gpu_memory_bytes: int = 0  # each GPU's memory
    needed_per_gpu_bytes: int = 0
    node_labels: dict = field(default_factory=dict)
    cpu: str | None = None
    memory: str | None = None
    machine_memory_bytes: int | None = None  # on the CPU: the machine's memory, when given

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_replica * self.nodes_per_replica

    def describe(self) -> str:
        if self.accelerator == "cpu":
            cores = f"{self.cpu} CPU, " if self.cpu else ""
            return f"CPU ({cores}{self.memory} memory)"
        nodes = f" on each of {self.nodes_per_replica} nodes" if self.nodes_per_replica > 1 else ""
        plural = "s" if self.gpus_per_replica > 1 else ""
        return f"{self.gpus_per_replica} x {self.gpu_kind} GPU{plural}{nodes}"

    def as_dict(self) -> dict:
        return asdict(self) | {"total_gpus": self.total_gpus, "text": self.describe()}


@dataclass(frozen=True)
class Sizing:
    suggestion: Suggestion | None  # a GPU layout where one holds it, else the CPU, else None
    options: list[Suggestion]  # each GPU kind's smallest fit
    unfit: list[tuple[str, str]]  # (GPU kind or machine, why it cannot hold the model)
    memory_needed_bytes: int  # on one GPU-equivalent, divided over gpuMemoryUtilization
    cpu_memory_bytes: int = 0  # what a replica on the CPU needs (cpu_replica_bytes)
    cpu: Suggestion | None = None  # the catalog's machine without GPUs that holds it, if any


def _tensor_parallel_sizes(shape: ModelShape | None, per_node: int) -> list[int]:
    """TP sizes up to a node's GPUs that divide the attention heads (and the KV heads, or are
    a multiple of them)."""
    sizes = []
    for size in TENSOR_PARALLEL_SIZES:
        if size > per_node:
            break
        if shape and shape.attention_heads and shape.attention_heads % size:
            continue
        if shape and shape.kv_heads and shape.kv_heads % size and size % shape.kv_heads:
            continue
        sizes.append(size)
    return sizes or [1]


def _layouts(
    shape: ModelShape | None, per_node: int, nodes: int | None = None
) -> list[tuple[int, int]]:
    """(GPUs per node, nodes) to try, smallest first: one node with 1-8 GPUs, then whole nodes
    up to MAX_GPUS (pipeline stages need at least one layer each), or up to `nodes` when the
    catalog says how many nodes of the kind there are (1: this machine)."""
    sizes = _tensor_parallel_sizes(shape, per_node)
    layouts = [(size, 1) for size in sizes]
    max_nodes = MAX_GPUS // sizes[-1]
    if nodes is not None:
        max_nodes = min(max_nodes, nodes)
    if shape and shape.layers:
        max_nodes = min(max_nodes, shape.layers)
    layouts += [(sizes[-1], nodes) for nodes in range(2, max_nodes + 1)]
    return layouts


def kind_nodes(kind: Mapping) -> int | None:
    """How many nodes of this kind there are (the catalog's `nodes`), or None: any number."""
    nodes = kind.get("nodes")
    return nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else None


def fit_kind(demand: Demand, kind: Mapping) -> Suggestion | str:
    """The smallest layout of this GPU kind that holds the model, or why none does."""
    memory = parse_bytes(kind["gpuMemory"])
    per_node = int(kind.get("gpusPerNode") or 1)
    layouts = _layouts(demand.shape, per_node, kind_nodes(kind))
    for tensor_parallel, nodes in layouts:
        needed = demand.needed_per_gpu(tensor_parallel, nodes)
        if needed <= memory:
            return Suggestion(
                accelerator="gpu",
                gpu_kind=kind["name"],
                gpus_per_replica=tensor_parallel,
                nodes_per_replica=nodes,
                gpu_memory_bytes=memory,
                needed_per_gpu_bytes=needed,
                node_labels=dict(kind.get("nodeLabels") or {}),
            )
    tensor_parallel, nodes = layouts[-1]
    needed = demand.needed_per_gpu(tensor_parallel, nodes)
    spread = f"{tensor_parallel} GPU{'s' if tensor_parallel > 1 else ''}" + (
        f" on each of {nodes} nodes" if nodes > 1 else ""
    )
    return (
        f"needs {human_bytes(needed)} per GPU even with {spread}; "
        f"each {kind['name']} GPU has {human_bytes(memory)}"
    )


def machine_memory(machine: Mapping) -> int | None:
    """A catalog entry's nodeMemory in bytes; None when not given or not a quantity."""
    try:
        return parse_bytes(machine["nodeMemory"])
    except (KeyError, TypeError, ValueError):
        return None


def fit_cpu(demand: Demand, machine: Mapping) -> Suggestion | str:
    """A replica on this machine's CPU when its memory holds the model, or why it does not.
    A machine whose memory is not given is taken to hold it (the admin said nothing)."""
    needed = cpu_replica_bytes(demand.weight_bytes, demand.kv_bytes)
    have = machine_memory(machine)
    if have is not None and needed > have:
        return (
            f"needs {human_bytes(needed)} of memory on the CPU; "
            f"{machine['name']} has {human_bytes(have)}"
        )
    # No core count: how many a replica takes is the manifest defaults' decision, and the
    # machine's cores are shared by every replica on it.
    return Suggestion(accelerator="cpu", memory=_gi(needed), machine_memory_bytes=have)


def _gi(n: int) -> str:
    return f"{math.ceil(n / GiB)}Gi"


def preference(option: Suggestion) -> tuple[int, int, int]:
    """How Check model ranks the GPU kinds that hold a model: fewest nodes, then fewest GPUs,
    then the smallest GPU."""
    return (option.nodes_per_replica, option.total_gpus, option.gpu_memory_bytes)


def size_on_catalog(demand: Demand, catalog: Sequence[Mapping], *, nvidia_only: bool) -> Sizing:
    """The smallest fitting choice: fewest nodes, then fewest GPUs, then the smallest GPU; the
    CPU of a machine without GPUs only when no GPU kind of the catalog holds the model (a
    catalog made only of GPU kinds never suggests the CPU)."""
    options: list[Suggestion] = []
    unfit: list[tuple[str, str]] = []
    for kind in gpu_kinds(catalog):
        if nvidia_only and kind.get("vendor", "nvidia") != "nvidia":
            unfit.append((kind["name"], "the vLLM runtime runs on NVIDIA GPUs only"))
            continue
        fit = fit_kind(demand, kind)
        if isinstance(fit, Suggestion):
            options.append(fit)
        else:
            unfit.append((kind["name"], fit))
    best = min(options, key=preference, default=None)
    on_cpu: Suggestion | None = None
    for machine in cpu_machines(catalog):
        fit = fit_cpu(demand, machine)
        if isinstance(fit, str):
            unfit.append((machine["name"], fit))
        elif on_cpu is None:
            on_cpu = fit
    return Sizing(
        best or on_cpu,
        options,
        unfit,
        demand.needed_per_gpu(),
        cpu_replica_bytes(demand.weight_bytes, demand.kv_bytes),
        on_cpu,
    )


def largest_kind(catalog: Sequence[Mapping]) -> Mapping | None:
    """The GPU kind with the most memory per GPU (machines without GPUs are not kinds)."""
    return max(gpu_kinds(catalog), key=lambda kind: parse_bytes(kind["gpuMemory"]), default=None)


def largest_machine(catalog: Sequence[Mapping]) -> Mapping | None:
    """The machine without GPUs with the most memory (given), or None."""
    machines = [m for m in cpu_machines(catalog) if machine_memory(m) is not None]
    return max(machines, key=lambda m: machine_memory(m) or 0, default=None)


def max_context_that_fits(
    demand: Demand, catalog: Sequence[Mapping], concurrency: int, limit: int
) -> int:
    """The longest context (up to `limit`) with which some GPU kind or machine of the catalog
    holds the model; 0 when even one token does not fit."""
    shape = demand.shape
    if shape is None:
        return 0

    def fits(tokens: int) -> bool:
        trial = Demand(
            demand.weight_bytes,
            kv_cache_bytes(shape, tokens, concurrency),
            shape,
            demand.gpu_memory_utilization,
        )
        return any(
            isinstance(fit_kind(trial, kind), Suggestion) for kind in gpu_kinds(catalog)
        ) or any(
            isinstance(fit_cpu(trial, machine), Suggestion) for machine in cpu_machines(catalog)
        )

    if not fits(1):
        return 0
    low, high = 1, limit
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low
