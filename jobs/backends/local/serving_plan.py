"""Which server the local backend starts for a manifest on this machine, and with what model.

SERVEDECK_LOCAL_COMMAND, when configured, runs as given (tests' stand-in, or an operator's
own server); else vLLM where it is installed and loads the model; else the CPU runtime
runtimes.choose_runtime picks for the model's task and weights layout. The machine is read
here (vLLM on the PATH, the runtimes' virtualenvs, the model folder); the decision is
runtimes.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.manifest.uri import UriError, parse_uri
from models_catalog.folders import (
    FolderRefused,
    configured_models_dir,
    folder_facts,
    resolve_folder,
)

from . import runtimes as rt
from .command import DEFAULT_TEMPLATE, on_gpu

COMMAND = "command"  # the configured SERVEDECK_LOCAL_COMMAND


@dataclass(frozen=True)
class Plan:
    runtime: str  # "command", "vllm", or a CPU runtime's name
    model: str  # a model folder's absolute path, or a Hugging Face repo id
    revision: str | None
    why: str  # for Check model and the log: "... because ..."


@dataclass(frozen=True)
class Refused:
    message: str
    field: str | None  # the manifest field it is about; None when the machine lacks something


def model_source(manifest: Mapping[str, Any]) -> tuple[str, str, str | None] | Refused:
    """(scheme, model, revision) of the manifest's uri: a resolved folder for file://, checked
    against the models folder as it is now (the runner asks again before each server start)."""
    uri = ((manifest.get("spec") or {}).get("source") or {}).get("model", {}).get("uri")
    try:
        info = parse_uri(uri) if isinstance(uri, str) else None
    except UriError as exc:
        return Refused(f"spec.source.model.uri: {exc.reason}. {exc.fix}", "spec.source.model.uri")
    if info is None or info.scheme not in ("hf", "file"):
        return Refused(
            f"spec.source.model.uri is {uri}: the local backend serves hf:// models and file:// "
            "folders under its models folder; use a Kubernetes profile for other storage.",
            "spec.source.model.uri",
        )
    if info.scheme == "file":
        try:
            folder = resolve_folder(info.file_path or "", configured_models_dir())
        except FolderRefused as exc:
            return Refused(str(exc), "spec.source.model.uri")
        return "file", str(folder), None
    return "hf", info.hf_repo or "", info.hf_revision


def plan(manifest: Mapping[str, Any], template: str = DEFAULT_TEMPLATE) -> Plan | Refused:
    """The server this machine runs the manifest with, or why none."""
    source = model_source(manifest)
    if isinstance(source, Refused):
        return source
    scheme, model, revision = source
    if template != DEFAULT_TEMPLATE:
        return Plan(COMMAND, model, revision, "SERVEDECK_LOCAL_COMMAND names the server.")
    vllm = rt.vllm_installed()
    if scheme == "hf":
        # Without vLLM this is refused where the command is checked (machine_check): the CPU
        # runtimes are given folders on disk, whose task and layout are read here.
        why = "vLLM is installed on this machine." if vllm else "vLLM serves hf:// models."
        return Plan(rt.VLLM, model, revision, why)
    runtimes_dir = rt.configured_runtimes_dir()
    facts = folder_facts(Path(model), wants_gpu=on_gpu(manifest))
    choice = rt.choose_runtime(
        facts,
        vllm_installed=vllm,
        installed=rt.installed_runtimes(runtimes_dir),
        runtimes_dir=runtimes_dir,
    )
    if isinstance(choice, rt.Refusal):
        field = None if choice.install else "spec.source.model.uri"
        return Refused(choice.message, field)
    return Plan(choice.runtime, model, revision, choice.why)
