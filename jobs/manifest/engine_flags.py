"""Engine arguments (engine.extraArgs, a model master's arguments) read the way vLLM's own
parser reads them, against the flags the platform supports.

vLLM's argument parser (argparse under FlexibleArgumentParser) turns `--a_b` into `--a-b`,
splits `--flag=value`, and takes any unambiguous prefix of a flag for the flag itself
(`--trust-remote` is `--trust-remote-code`, `--hos` is `--host`). A list of refused names
cannot follow that; an allowlist can: every token resolves against the flags known here, and
only a flag on the allowlist, with a value of its type, is accepted. A prefix that vLLM would
resolve to a flag not known here still resolves, in vLLM, to the allowed flag it shares or is
ambiguous (an error), so nothing outside the allowlist gets through.

Pure: `check_engine_args(args, ...)` answers (index, sentence) pairs; callers add the path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .problems import listing, show

# Value kinds: "bool" takes no value; "int", "float", "text", "json"; a tuple is a choice.
Kind = str | tuple[str, ...]

# Flags the platform supports in engine.extraArgs, with the value each takes. Boolean flags
# that vLLM declares with BooleanOptionalAction have their --no- form listed too.
ALLOWED_FLAGS: Mapping[str, Kind] = {
    "--enforce-eager": "bool",
    "--seed": "int",
    "--max-num-batched-tokens": "int",
    "--max-num-partial-prefills": "int",
    "--max-long-partial-prefills": "int",
    "--long-prefill-token-threshold": "int",
    "--max-seq-len-to-capture": "int",
    "--max-logprobs": "int",
    "--max-log-len": "int",
    "--num-gpu-blocks-override": "int",
    "--max-parallel-loading-workers": "int",
    "--enable-prefix-caching": "bool",
    "--no-enable-prefix-caching": "bool",
    "--enable-chunked-prefill": "bool",
    "--no-enable-chunked-prefill": "bool",
    "--async-scheduling": "bool",
    "--disable-sliding-window": "bool",
    "--disable-cascade-attn": "bool",
    "--disable-custom-all-reduce": "bool",
    "--disable-log-stats": "bool",
    "--disable-log-requests": "bool",
    "--enable-log-requests": "bool",
    "--disable-frontend-multiprocessing": "bool",
    "--enable-auto-tool-choice": "bool",
    "--return-tokens-as-token-ids": "bool",
    "--enable-prompt-tokens-details": "bool",
    "--enable-server-load-tracking": "bool",
    "--enable-expert-parallel": "bool",
    "--calculate-kv-scales": "bool",
    "--disable-mm-preprocessor-cache": "bool",
    "--skip-tokenizer-init": "bool",
    "--block-size": ("1", "8", "16", "32", "64", "128"),
    "--kv-cache-dtype": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16"),
    "--swap-space": "float",
    "--cpu-offload-gb": "float",
    "--mm-processor-cache-gb": "float",
    "--rope-theta": "float",
    "--tokenizer-mode": ("auto", "slow", "mistral"),
    "--config-format": ("auto", "hf", "mistral"),
    # Formats read from the model's own files; runai_streamer, tensorizer, sharded_state and
    # gguf pull from object storage or read a path, so they are not among the choices.
    "--load-format": ("auto", "pt", "safetensors", "npcache", "dummy", "mistral", "bitsandbytes"),
    "--scheduling-policy": ("fcfs", "priority"),
    "--preemption-mode": ("recompute", "swap"),
    "--prefix-caching-hash-algo": ("builtin", "sha256", "sha256_cbor"),
    "--chat-template-content-format": ("auto", "string", "openai"),
    "--guided-decoding-backend": ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"),
    "--generation-config": ("auto", "vllm"),  # anything else is a folder on the host
    "--response-role": "text",
    "--override-generation-config": "json",
    "--rope-scaling": "json",
    "--mm-processor-kwargs": "json",
}

# Why a flag is never passed. "serve": how the server listens, which the platform decides;
# "path": it names a file or folder on the machine; "remote": it downloads or runs code.
SERVE, PATH, REMOTE = "serve", "path", "remote"
REFUSED_FLAGS: Mapping[str, str] = {
    "--host": SERVE,
    "--port": SERVE,
    "--uds": SERVE,
    "--api-key": SERVE,
    "--root-path": SERVE,
    "--ssl-keyfile": PATH,
    "--ssl-certfile": PATH,
    "--ssl-ca-certs": PATH,
    "--headless": SERVE,
    "--api-server-count": SERVE,
    "--data-parallel-address": SERVE,
    "--data-parallel-rpc-port": SERVE,
    "--master-addr": SERVE,
    "--master-port": SERVE,
    "--otlp-traces-endpoint": SERVE,
    "--download-dir": PATH,
    "--chat-template": PATH,
    "--config": PATH,
    "--log-config-file": PATH,
    "--hf-config-path": PATH,
    "--allowed-local-media-path": PATH,
    "--compilation-config": PATH,  # holds cache_dir and debug_dump_path
    "--model-loader-extra-config": PATH,
    "--pt-load-map-location": PATH,
    "--lora-modules": PATH,
    "--qlora-adapter-name-or-path": PATH,
    "--trust-remote-code": REMOTE,
    "--no-trust-remote-code": REMOTE,
    "--code-revision": REMOTE,
    "--tokenizer": REMOTE,
    "--tokenizer-revision": REMOTE,
    "--hf-token": REMOTE,
    "--hf-overrides": REMOTE,
    "--speculative-config": REMOTE,
    "--speculative-model": REMOTE,
    "--kv-transfer-config": REMOTE,
    "--kv-events-config": REMOTE,
    "--tool-parser-plugin": REMOTE,
    "--reasoning-parser-plugin": REMOTE,
    "--io-processor-plugin": REMOTE,
    "--logits-processors": REMOTE,
    "--middleware": REMOTE,
    "--worker-cls": REMOTE,
    "--worker-extension-cls": REMOTE,
    "--scheduler-cls": REMOTE,
    "--allowed-media-domains": REMOTE,
}
_REASONS = {
    SERVE: "decides how the server listens and who may call it, which the platform sets",
    PATH: "names a file or folder on the machine that runs the model server",
    REMOTE: "makes the server download or run code from elsewhere",
}

# Flags that a manifest field sets, and the field to use instead (None: the platform).
FIELD_FLAGS: Mapping[str, str | None] = {
    "--dtype": "engine.dtype",
    "--quantization": "engine.quantization",
    "-q": "engine.quantization",
    "--tensor-parallel-size": "engine.tensorParallelSize",
    "-tp": "engine.tensorParallelSize",
    "--pipeline-parallel-size": "engine.pipelineParallelSize",
    "-pp": "engine.pipelineParallelSize",
    "--reasoning-parser": "engine.reasoningParser",
    "--tool-call-parser": "engine.toolCallParser",
    "--gpu-memory-utilization": "engine.gpuMemoryUtilization",
    "--max-model-len": "serving.maxContextTokens",
    "--max-num-seqs": "serving.maxConcurrentRequests",
    "--limit-mm-per-prompt": "serving.multimodal",
    "--kv-cache-memory-bytes": "serving.kvCacheSize",
    "--served-model-name": "spec.name",
    "--enable-lora": "source.model.adapters",
    "--max-lora-rank": "source.model.adapters",
    "--max-loras": "source.model.adapters",
    "--model": "source.model.uri",
    "--revision": "source.model.uri",
}

MAX_ARGS = 64
MAX_TEXT = 200
MAX_JSON = 2000
_NAME = re.compile(r"--[a-z0-9][a-z0-9-]*\Z")
_INT = re.compile(r"[+-]?\d{1,12}\Z")
_FLOAT = re.compile(r"[+-]?(\d{1,12}(\.\d{0,12})?|\.\d{1,12})([eE][+-]?\d{1,3})?\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
KINDS = ("bool", "int", "float", "text", "json")


def parse_extra_flags(text: str) -> dict[str, Kind]:
    """Flags an operator's model server takes beyond the platform's list, written as
    `--name=kind ...` (kind: bool, int, float, text or json); a refused flag stays refused.
    Raises ValueError naming the entry that cannot be read."""
    flags: dict[str, Kind] = {}
    for entry in text.split():
        name, _, kind = entry.partition("=")
        if not _NAME.match(name) or kind not in KINDS:
            raise ValueError(
                f"{entry!r} is not --name=kind (kind one of {', '.join(KINDS)}); write for "
                "example --crash-after=float --fail-on-start=bool."
            )
        if name not in REFUSED_FLAGS and name not in FIELD_FLAGS:
            flags[name] = kind
    return flags


def check_engine_args(
    args: Sequence[Any],
    *,
    custom_runtime: bool = False,
    extra_flags: Mapping[str, Kind] | None = None,
) -> list[tuple[int, str]]:
    """(index, sentence) for each argument vLLM would read as something not accepted.

    custom_runtime: a runtime of the user's, whose flags the platform does not know: only the
    path and remote-code flags are refused there (its fields set no flag), others pass.
    """
    allowed = {**ALLOWED_FLAGS, **(extra_flags or {})}
    known = {**{name: "allowed" for name in allowed}, **REFUSED_FLAGS}
    if not custom_runtime:
        known.update({name: "field" for name in FIELD_FLAGS})
    problems: list[tuple[int, str]] = []
    if len(args) > MAX_ARGS:
        return [(MAX_ARGS, f"is one of {len(args)} arguments; accepts at most {MAX_ARGS}.")]
    index = 0
    while index < len(args):
        index += 1 + _check_one(args, index, known, allowed, custom_runtime, problems)
    return problems


def _check_one(
    args: Sequence[Any],
    index: int,
    known: Mapping[str, str],
    allowed: Mapping[str, Kind],
    custom_runtime: bool,
    out: list[tuple[int, str]],
) -> int:
    """Check args[index]; answer how many following arguments it took as its value."""
    arg = args[index]
    if not isinstance(arg, str):
        return 0  # the schema refuses it already, as not text
    if custom_runtime and not arg.startswith("--"):
        return 0  # a value, or a flag style the platform cannot read for that runtime
    given = arg.strip()
    if not given:
        out.append((index, "is empty; accepts an engine flag such as --enforce-eager."))
        return 0
    if _CONTROL.search(arg):
        out.append((index, f"{show(arg)} holds a control character; remove it."))
        return 0
    if given != arg:
        # vLLM gets the item as it is: with spaces around it, it is not read as a flag.
        out.append((index, f"{show(arg)} has spaces around it; remove them."))
        return 0
    if not given.startswith("-") or _INT.match(given) or _FLOAT.match(given):
        out.append(
            (
                index,
                f"{show(arg)} is not a flag and follows no flag that takes a value; accepts "
                "flags like --seed=1 or --seed followed by 1. Put the value after its flag.",
            )
        )
        return 0
    if not given.startswith("--"):
        field = FIELD_FLAGS.get(given)
        if field is not None and not custom_runtime:
            out.append((index, _field_sentence(arg, given, field)))
        else:
            out.append(
                (
                    index,
                    f"{show(arg)} is a short flag; accepts the long flags the platform supports "
                    "(--name or --name=value). Write the flag in full.",
                )
            )
        return 0
    name, has_value, value = given.partition("=")
    name = name.replace("_", "-")  # as vLLM's parser does, before argparse reads it
    if any(char.isspace() for char in name):
        out.append(
            (
                index,
                f"{show(arg)} holds a space, so vLLM reads it as one word, not as "
                f"{name.split()[0]} and a value; accepts a flag and its value as two items or "
                "as --name=value. Split it.",
            )
        )
        return 0
    if not _NAME.match(name):
        out.append(
            (
                index,
                f"{show(arg)} is not a flag name; accepts --name or --name=value, with letters, "
                "digits and '-' (give a flag and its value as two items or with '=').",
            )
        )
        return 0
    flag = _resolve(arg, name, known, custom_runtime, out, index)
    if flag is None:
        return 0
    role = known[flag]
    if role == "field":
        out.append((index, _field_sentence(arg, flag, FIELD_FLAGS[flag])))
        return 0
    if custom_runtime and role == SERVE:
        return 0  # its own server: how it listens is its ServingRuntime's business
    if role != "allowed":
        out.append(
            (
                index,
                f"{show(arg)} is read as {flag}, which {_REASONS[role]}; accepts the flags the "
                "platform supports. Remove it.",
            )
        )
        return 0
    if custom_runtime:
        return 0
    kind = allowed[flag]
    if kind == "bool":
        if has_value:
            out.append((index, f"{show(arg)}: {flag} takes no value. Write {flag} alone."))
        return 0
    if not has_value:
        following = args[index + 1] if index + 1 < len(args) else None
        if not isinstance(following, str) or (
            following.startswith("-") and not _FLOAT.match(following)
        ):
            out.append((index, f"{show(arg)}: {flag} takes a value ({_accepts(kind)}); add it."))
            return 0
        problem = _value_problem(following, kind)
        if problem:
            out.append((index + 1, f"{show(following)}, the value of {flag}, {problem}"))
        return 1
    problem = _value_problem(value, kind)
    if problem:
        out.append((index, f"{show(value)}, the value of {flag}, {problem}"))
    return 0


def _resolve(
    arg: str,
    name: str,
    known: Mapping[str, str],
    custom_runtime: bool,
    out: list[tuple[int, str]],
    index: int,
) -> str | None:
    """The flag vLLM reads `name` as: itself, or the one known flag it is a prefix of."""
    if name in known:
        return name
    candidates = sorted(flag for flag in known if flag.startswith(name))
    if len(candidates) == 1:
        return candidates[0]
    if custom_runtime:
        if any(known[flag] in (PATH, REMOTE) for flag in candidates):
            out.append(
                (
                    index,
                    f"{show(arg)} could be read as {listing(candidates)}; accepts no flag that "
                    "names a host path or downloads or runs code. Write the flag in full.",
                )
            )
        return None
    if candidates:
        out.append(
            (
                index,
                f"{show(arg)} is ambiguous: it could be {listing(candidates)}; accepts one flag. "
                "Write the flag in full.",
            )
        )
    else:
        out.append(
            (
                index,
                f"{show(arg)} is not an engine flag the platform supports; accepts "
                f"{listing(ALLOWED_FLAGS, 8)}. Remove it, or ask an operator to allow it.",
            )
        )
    return None


def _field_sentence(arg: str, flag: str, field: str | None) -> str:
    if field is None:
        return (
            f"{show(arg)} sets {flag}, which the platform sets; accepts arguments no field or "
            "the platform sets. Remove it."
        )
    return (
        f"{show(arg)} repeats {flag}, which {field} sets; accepts arguments no field sets. "
        f"Remove it and set {field} instead."
    )


def _accepts(kind: Kind) -> str:
    if isinstance(kind, tuple):
        return "one of " + ", ".join(kind)
    return {
        "int": "a whole number",
        "float": "a number",
        "text": f"text of at most {MAX_TEXT} characters",
        "json": "a JSON object",
    }[kind]


def _value_problem(value: str, kind: Kind) -> str | None:
    """Why `value` is not of `kind` (a sentence tail), or None."""
    ok = True
    if isinstance(kind, tuple):
        ok = value in kind
    elif kind == "int":
        ok = bool(_INT.match(value))
    elif kind == "float":
        ok = bool(_FLOAT.match(value))
    elif kind == "text":
        ok = 0 < len(value) <= MAX_TEXT and not _CONTROL.search(value)
    elif kind == "json":
        ok = len(value) <= MAX_JSON and _is_json_object(value)
    if ok:
        return None
    return f"is not accepted; accepts {_accepts(kind)}. Correct it."


def _is_json_object(value: str) -> bool:
    try:
        return isinstance(json.loads(value), dict)
    except (ValueError, RecursionError):
        return False
