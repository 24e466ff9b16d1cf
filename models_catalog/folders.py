"""Models already on this machine's disk: which folders a file:// source may name, and what a
folder holds (task, architecture, parameters, experts, weights layout), read from its
config.json, modules.json and safetensors headers, never the weights.

The folder must sit under the configured models folder (SERVEDECK_MODELS_DIR): a manifest
cannot make a model server read anything else on the console's machine. The check is on the
resolved path, so a symlink that leads out of the models folder is refused too. Check model
(models_catalog.check) and the local backend (jobs.backends.local.serving_plan, again before
each server start) both read folders here.

The models folder is one for the console, not one per organisation: it is the operator's
shelf of models any organisation may serve, and whatever is in it is open to every member
who may deploy. The console writes nothing into it; an operator who points it at a folder
members' deployments write to (the local state folder, a Hugging Face cache vLLM downloads
hf:// models into) shares those files with every organisation.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jobs.backends.local.model_files as model_files
import jobs.backends.local.runtimes as rt
from models_catalog import safetensors_header as headers

MODELS_DIR_SETTING = "SERVEDECK_MODELS_DIR"
URI_FIELD = "spec.source.model.uri"
# A safetensors header above this is not a header: a damaged or hostile file. Real headers
# of sharded checkpoints stay well under a MiB per file.
MAX_HEADER_BYTES = 16 * 2**20
# A config.json or modules.json above this is not a config: it is not read into memory.
MAX_JSON_BYTES = model_files.MAX_JSON_BYTES
# A model folder holds tens of files; one with more is not a model's (and is not walked).
MAX_FOLDER_ENTRIES = 10_000


class FolderRefused(ValueError):
    """The file:// source cannot be served from here; the message says why and what to do."""


def configured_models_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The only folder file:// sources may name (SERVEDECK_MODELS_DIR, else var/models)."""
    return rt.configured_folder(MODELS_DIR_SETTING, "models", environ)


def resolve_folder(path: str, models_dir: str | os.PathLike[str]) -> Path:
    """The model folder a file:// uri's path names, resolved; raises FolderRefused unless it
    is an existing folder inside `models_dir` (after every symlink is followed)."""
    root = Path(models_dir)
    where = f"{URI_FIELD} file://{path}"
    if not os.path.isabs(path) or ".." in Path(path).parts:
        raise FolderRefused(f"{where} is not a plain absolute path; give the folder's path.")
    try:
        resolved_root = root.resolve(strict=True)
    except OSError:
        raise FolderRefused(
            f"{where}: the models folder {root} ({MODELS_DIR_SETTING}) does not exist; create "
            f"it and put the model's folder in it, or set {MODELS_DIR_SETTING}."
        ) from None
    resolved = Path(os.path.realpath(path))
    if resolved != resolved_root and resolved_root not in resolved.parents:
        # Where a link leads is said only for a link inside the models folder: the path of
        # anything else on this machine is not told to whoever asks.
        given = Path(path)
        inside = any(given.is_relative_to(r) for r in (root, resolved_root))
        moved = f" (it leads to {resolved})" if inside else ""
        raise FolderRefused(
            f"{where} is outside the models folder {resolved_root}{moved}; the local backend "
            f"serves folders under {MODELS_DIR_SETTING} only. Move or copy the model's folder "
            f"into {resolved_root}, or set {MODELS_DIR_SETTING} to the folder that holds it."
        )
    try:
        is_folder = resolved.is_dir()
    except OSError:  # a name too long for this machine, a loop: no folder either way
        is_folder = False
    if not is_folder:
        raise FolderRefused(
            f"{where} is not a folder on this machine; give the path of the folder that holds "
            "the model's config.json and weights."
        )
    entries = _entries(resolved)
    if entries is None:
        raise FolderRefused(
            f"{where} holds more than {MAX_FOLDER_ENTRIES} files; a model folder holds its "
            "configs, tokenizer and weights. Give the model's own folder."
        )
    for entry in entries:
        target = Path(os.path.realpath(entry))
        if target != resolved_root and resolved_root not in target.parents:
            # The server would read it as the model's file: nothing outside the models
            # folder is served, whichever link leads there. Where it leads is not told.
            raise FolderRefused(
                f"{where} holds {entry.relative_to(resolved)}, a link that leads outside the "
                f"models folder {resolved_root}; the local backend serves files under "
                f"{MODELS_DIR_SETTING} only. Replace the link with a copy of the file."
            )
    return resolved


def _entries(folder: Path) -> list[Path] | None:
    """The folder's entries and those of its subfolders one level down (what the servers and
    file_names read); None when they are more than MAX_FOLDER_ENTRIES."""
    found: list[Path] = []
    pending = [(folder, 0)]
    while pending:
        current, depth = pending.pop()
        try:
            listing = os.scandir(current)
        except OSError:
            continue
        with listing:
            for entry in listing:
                found.append(Path(entry.path))
                if len(found) > MAX_FOLDER_ENTRIES:
                    return None
                if depth == 0 and entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), 1))
    return found


def read_json(path: Path) -> Any:
    """A JSON file of the folder, or None when it is missing, unreadable, not a regular file
    or larger than MAX_JSON_BYTES."""
    data = model_files.read_regular(path, MAX_JSON_BYTES)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def file_names(folder: Path) -> list[str]:
    """The folder's files, as paths relative to it (one level of subfolders: Sentence
    Transformers keeps its pooling config in one)."""
    names = []
    for entry in sorted(folder.iterdir()):
        if entry.is_file():
            names.append(entry.name)
        elif entry.is_dir() and not entry.name.startswith("."):
            names += [f"{entry.name}/{p.name}" for p in sorted(entry.iterdir()) if p.is_file()]
    return names


def safetensors_parameters(folder: Path) -> dict[str, int]:
    """Parameters per dtype from the headers of the folder's .safetensors files; raises
    FolderRefused (naming the file and the tensor) for a header with values no checkpoint has
    (safetensors_header), or more header bytes than any model's."""
    found = headers.Tensors()
    for file in sorted(folder.glob("*.safetensors")):
        try:
            found.add(_safetensors_header(file, found), file.name)
        except headers.HeaderRefused as exc:
            raise FolderRefused(f"{URI_FIELD} file://{folder}: {exc}") from None
    return found.counts


def _safetensors_header(file: Path, found: headers.Tensors) -> Any:
    """The JSON header of a regular .safetensors file; {} when it has none that can be read
    within MAX_HEADER_BYTES. Its length counts towards the folder's (`found`) before it is
    read."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        head = handle.read(8)
        if len(head) < 8:
            return {}
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            return {}
        found.take_header_bytes(length, file.name)
        try:
            return headers.parse(handle.read(length), file.name)
        except ValueError as exc:
            if isinstance(exc, headers.HeaderRefused):
                raise
            return {}


def folder_task(config: Mapping[str, Any] | None, names: list[str], layout: str | None) -> str:
    """generate | embed | score | transcribe, from the folder's configs."""
    if layout == rt.CTRANSLATE2:
        return rt.TRANSCRIBE  # CTranslate2 checkpoints the runtimes serve are Whisper's
    archs = [str(a) for a in (config or {}).get("architectures") or []]
    arch = archs[0] if archs else ""
    if "Whisper" in arch or "SpeechSeq2Seq" in arch:
        return rt.TRANSCRIBE
    if arch.endswith("ForSequenceClassification"):
        return rt.SCORE
    if "modules.json" in names or "sentence_bert_config.json" in names:
        return rt.EMBED  # a Sentence Transformers folder: a pooling model
    if arch.endswith(("Model", "ForMaskedLM")) and not arch.endswith("LMHeadModel"):
        return rt.EMBED  # an encoder without a generation head
    return rt.GENERATE


def folder_facts(folder: Path, wants_gpu: bool = False) -> rt.ModelFacts:
    """What the runtime choice needs to know about a model folder (FolderRefused for a
    safetensors header no checkpoint has)."""
    config = read_json(folder / "config.json")
    parameters = sum(safetensors_parameters(folder).values()) or None
    files_refusal = model_files.folder_refusal(folder, f"file://{folder}")
    return model_facts(file_names(folder), config, parameters, wants_gpu, files_refusal)


def model_facts(
    names: list[str],
    config: Any,
    parameters: int | None,
    wants_gpu: bool = False,
    files_refusal: str | None = None,
) -> rt.ModelFacts:
    """What the runtime choice needs, from a folder's or a Hub repository's file names, its
    config.json (None when it has none), its parameter count and model_files' refusal of the
    classes its files name: the one reading of both."""
    layout = rt.weights_layout(names) or "unknown"
    config = config if isinstance(config, dict) else None
    archs = (config or {}).get("architectures") or []
    experts = None
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        value = (config or {}).get(key) or ((config or {}).get("text_config") or {}).get(key)
        if isinstance(value, int):
            experts = value
            break
    return rt.ModelFacts(
        task=folder_task(config, names, layout),
        layout=layout,
        architecture=str(archs[0]) if archs else None,
        parameters=parameters,
        experts=experts,
        wants_gpu=wants_gpu,
        files_refusal=files_refusal,
    )
