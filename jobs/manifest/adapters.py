"""LoRA adapters served by a vLLM model's replicas (spec.source.model.adapters): the field's
shape and rules, what Check model requires of an adapter's adapter_config.json, and the vLLM
flags the platform sets for them (never engine.extraArgs).

Pure: plain values in, problems (with their field paths) or argument lists out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import Reject, dns_label
from .problems import Out, given, show
from .uri import UriError, UriInfo, parse_uri

PATH = "spec.source.model.adapters"
MAX_ADAPTERS = 16
# The schemes an adapter is read from: the Hub, an S3 folder, a folder under the local
# backend's models folder (file://, checked by the backend that reads it).
SCHEMES = ("hf", "s3", "file")
FIELDS = ("name", "uri")
# vLLM's --max-lora-rank accepts these values only (vllm/config/lora.py); the platform gives
# the engine MAX_RANK, and Check model refuses an adapter of a larger rank.
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
MAX_RANK = 64
ACCEPTS = (
    f"a list of up to {MAX_ADAPTERS} adapters, each a mapping with name (a DNS-1123 label, the "
    "model id clients call it by) and uri (hf://<org>/<repo>[:<revision>], s3://<bucket>/<key> "
    "or file://<folder>)"
)
# What Check model requires of adapter_config.json.
CONFIG_FILE = "adapter_config.json"
LORA_PEFT_TYPE = "LORA"


@dataclass(frozen=True)
class Adapter:
    index: int  # its place in the list, for the field path
    name: str
    uri: UriInfo


def shape(value: Any) -> list[Any]:
    """The schema's check: a bounded list of mappings with name and uri only (each item's own
    values are read by `read`, which names the item)."""
    if not isinstance(value, (list, tuple)):
        raise Reject(
            f"{given(value)}, not a list of adapters",
            'Write it like [{name: my-lora, uri: "hf://org/repo"}].',
        )
    if len(value) > MAX_ADAPTERS:
        raise Reject(
            f"{len(value)} adapters is more than {MAX_ADAPTERS}",
            "Serve the others from another application of the same base model.",
        )
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise Reject(f"item {index} is {given(item)}, not a mapping with name and uri")
        unknown = [str(k) for k in item if k not in FIELDS]
        if unknown:
            raise Reject(
                f"item {index} has the unknown field {show(unknown[0])}",
                "An adapter has name and uri only; remove the others.",
            )
    return [dict(item) for item in value]


def read(items: Sequence[Mapping[str, Any]], base_name: str | None, out: Out) -> list[Adapter]:
    """The adapters that pass their rules; each problem names adapters[i].<field>."""
    found: list[Adapter] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        at = f"{PATH}[{index}]"
        name, text = item.get("name"), item.get("uri")
        good = True
        if name is None:
            out.refuse(
                f"{at}.name",
                "required, missing; accepts a DNS-1123 label. Add it, for example "
                "name: support-lora.",
            )
            good = False
        else:
            try:
                name = dns_label(name)
            except Reject as exc:
                fix = exc.fix or "For example support-lora."
                out.refuse(
                    f"{at}.name",
                    f"{exc.reason}; accepts a DNS-1123 label (lowercase letters, digits and "
                    f"dashes, at most 63), the model id clients call the adapter by. {fix}",
                )
                good = False
        if good and name == base_name:
            out.refuse(
                f"{at}.name",
                f"{show(name)} is spec.name, the base model's own id; accepts a name of its own. "
                f"Rename the adapter, for example {name}-lora.",
            )
            good = False
        if good and name in seen:
            out.refuse(
                f"{at}.name",
                f"{show(name)} is also the name of adapters[{seen[name]}]; accepts a name per "
                "adapter. Give each adapter its own name.",
            )
            good = False
        if good:
            seen[name] = index
        info = _uri(text, f"{at}.uri", out)
        if good and info is not None:
            found.append(Adapter(index, name, info))
    return found


def _uri(text: Any, path: str, out: Out) -> UriInfo | None:
    if text is None:
        out.refuse(
            path,
            "required, missing; accepts hf://<org>/<repo>[:<revision>], s3:// or file://. Add it.",
        )
        return None
    if not isinstance(text, str):
        out.refuse(
            path,
            f"{given(text)}, not text; accepts hf://<org>/<repo>[:<revision>], s3:// or file://.",
        )
        return None
    try:
        info = parse_uri(text)
    except UriError as exc:
        out.refuse(path, f"{exc.reason}. {exc.fix}")
        return None
    if info.scheme not in SCHEMES:
        out.refuse(
            path,
            f"{show(info.text)} is on {info.scheme}://; an adapter is read from hf://, s3:// or "
            "file:// only. Copy it to the Hub, a bucket, or the models folder.",
        )
        return None
    return info


def engine_refusal(engine: str | None) -> str:
    """Why a runtime that is not the platform's vLLM serves no adapter (one message)."""
    return (
        f"is set, but runtime.engine {show(engine)} is not vLLM: only vLLM serves LoRA "
        "adapters; accepts adapters with format vLLM and runtime.engine vllm. Remove adapters, "
        "or serve the model on vLLM."
    )


def cpu_runtime_refusal(runtime: str) -> str:
    """Why a local CPU runtime other than vLLM's CPU build serves no adapter."""
    return (
        f"{PATH}: this machine serves the model on {runtime}, which cannot serve LoRA adapters; "
        "only vLLM (on a GPU, or its CPU build) does. Remove adapters, or install vLLM's CPU "
        "build (scripts/install_runtimes.sh vllm) so the model is served on it."
    )


def lora_args(adapters: Sequence[tuple[str, str]]) -> list[str]:
    """vLLM's flags for (name, path) adapters, in vLLM's own parser's form; [] for none."""
    if not adapters:
        return []
    args = ["--enable-lora", "--max-lora-rank", str(MAX_RANK), "--max-loras", str(len(adapters))]
    args += ["--lora-modules", *(_lora_module(name, path) for name, path in adapters)]
    return args


def _lora_module(name: str, path: str) -> str:
    """One --lora-modules item: NAME=PATH (vLLM splits at the first "="; a name is a DNS
    label), or vLLM's JSON form where the path holds a comma (it reads such an item as JSON)."""
    if "," in path:
        return json.dumps({"name": name, "path": path})
    return f"{name}={path}"


def names(manifest: Mapping[str, Any]) -> list[str]:
    """The adapter names of a filled manifest (what the gateway lists and routes)."""
    model = ((manifest.get("spec") or {}).get("source") or {}).get("model") or {}
    items = model.get("adapters") if isinstance(model, Mapping) else None
    if not isinstance(items, list):
        return []
    return [i["name"] for i in items if isinstance(i, Mapping) and isinstance(i.get("name"), str)]


def config_problems(
    config: Any, base_repo: str | None, index: int, max_rank: int = MAX_RANK
) -> list[str]:
    """What is wrong with an adapter's adapter_config.json for a base model whose Hub repo id
    (or, for a folder, absolute path) is `base_repo` (None: not compared; a repo id is not
    compared with a path): sentences that say what was found and what to do."""
    where = f"{PATH}[{index}].uri"
    if not isinstance(config, Mapping):
        return [
            f"{where}: its {CONFIG_FILE} is not a JSON object; a PEFT LoRA adapter has "
            "one. Point uri at the adapter's folder."
        ]
    problems: list[str] = []
    kind = config.get("peft_type")
    if kind is not None and str(kind).upper() != LORA_PEFT_TYPE:
        problems.append(
            f"{where}: {CONFIG_FILE} says peft_type {show(kind)}; vLLM serves LORA adapters only. "
            "Train a LoRA adapter, or remove it."
        )
    base = config.get("base_model_name_or_path")
    comparable = (
        base_repo is not None
        and isinstance(base, str)
        and bool(base.strip())
        and base.strip().startswith("/") == base_repo.startswith("/")
    )
    if comparable and _repo_id(base) != _repo_id(base_repo or ""):
        problems.append(
            f"{where}: the adapter was trained on {show(base)} ({CONFIG_FILE}'s "
            f"base_model_name_or_path), not on this model's {show(base_repo)}; accepts an "
            "adapter of the same base. Serve it with an application of its base, or use an "
            "adapter trained on this one."
        )
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        problems.append(
            f"{where}: {CONFIG_FILE} has r {show(rank)}, not a positive whole rank; a "
            "LoRA adapter's config names its rank. Check the adapter's files."
        )
    elif rank > max_rank:
        problems.append(
            f"{where}: the adapter's rank (r in {CONFIG_FILE}) is {rank}, above {max_rank}, "
            f"the largest the platform gives vLLM (--max-lora-rank); accepts r up to {max_rank}. "
            f"Train it with a rank of {max_rank} or less."
        )
    targets = config.get("target_modules")
    if not targets or not isinstance(targets, (list, str)):
        problems.append(
            f"{where}: {CONFIG_FILE} names no target_modules (found {show(targets)}); vLLM "
            "needs the layers the adapter changes. Save the adapter with peft again."
        )
    return problems


def _repo_id(text: str) -> str:
    """A repo id as compared: a trailing slash, an hf:// prefix and a revision dropped, lowered
    (the Hub's ids are case-insensitive)."""
    text = text.strip().removeprefix("hf://").rstrip("/")
    return text if text.startswith("/") else text.split(":", 1)[0].lower()


# vLLM loads and unloads adapters at run time (POST /v1/load_lora_adapter,
# /v1/unload_lora_adapter) only with this set: a replica started with adapters gets it, so a
# revision that changes only its adapters reaches it without a restart.
RUNTIME_UPDATING_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def without_adapters(manifest: Mapping[str, Any]) -> Any:
    """The manifest with its adapters left out (a plain copy), to compare the rest."""
    spec = dict(manifest.get("spec") or {})
    source = dict(spec.get("source") or {})
    model = dict(source.get("model") or {})
    model.pop("adapters", None)
    source["model"] = model
    spec["source"] = source
    return {**manifest, "spec": spec}


def runtime_swap(
    old_manifest: Mapping[str, Any],
    new_manifest: Mapping[str, Any],
    old: Sequence[tuple[str, str]],
    new: Sequence[tuple[str, str]],
) -> tuple[list[str], list[tuple[str, str]]] | None:
    """(names to unload, (name, folder) to load) that take running replicas from the `old`
    adapters to the `new` ones without a restart; None when a restart is needed: anything but
    the adapters changed, or either side has none (a replica started without adapters has no
    LoRA support; one left without any keeps --enable-lora, so it restarts without it)."""
    if not old or not new:
        return None
    if without_adapters(old_manifest) != without_adapters(new_manifest):
        return None
    before, after = dict(old), dict(new)
    unload = [name for name, path in before.items() if after.get(name) != path]
    load = [(name, path) for name, path in after.items() if before.get(name) != path]
    return unload, load
