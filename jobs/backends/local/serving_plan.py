"""Which server the local backend starts for a manifest on this machine, and with what model.

SERVEDECK_LOCAL_COMMAND, when configured, runs as given (tests' stand-in, or an operator's
own server); else the server runtimes.choose_runtime picks (the one decision, Check model's
too): vLLM for a replica on GPUs, else the CPU runtime of the model's task and weights layout.
The machine is read here (vLLM on the PATH, the runtimes' virtualenvs, the model folder, or,
for hf:// whichever server runs it, the Hub repository's file list and config). An hf://
model on a CPU runtime is downloaded by the replica itself (download_launcher.py) into the
downloads folder, at the commit resolved here, so the folder it is served from is fixed by
the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.manifest import adapters as lora
from jobs.manifest.uri import UriError, parse_uri
from jobs.storage_access import ANONYMOUS, CREDENTIALS_FIELD, Credentials
from models_catalog import hub, hub_weights
from models_catalog.architectures import vllm_cpu_here
from models_catalog.azure_reads import AzureReader, split_url
from models_catalog.folders import (
    FolderRefused,
    configured_models_dir,
    folder_facts,
    model_facts,
    resolve_folder,
)
from models_catalog.gcs_reads import GCSReader
from models_catalog.hub_facts import repo_facts
from models_catalog.s3_reads import S3Reader, StorageDenied, StorageError, StorageUnavailable

from . import download_files
from . import runtimes as rt
from .command import DEFAULT_TEMPLATE, on_gpu

COMMAND = "command"  # the configured SERVEDECK_LOCAL_COMMAND
URI = "spec.source.model.uri"
# The bucket folders the local backend downloads: the reader each is read with at apply, and
# where the operator points the console at its endpoint.
# (https://: Azure Blob, the only https:// the uri parser accepts.)
BUCKET_READERS = {"s3": S3Reader, "gs": GCSReader, "https": AzureReader}
ENDPOINT_SETTING = {
    "s3": "AWS_ENDPOINT_URL_S3",
    "gs": "STORAGE_EMULATOR_HOST",
    "https": "SERVEDECK_AZURE_BLOB_ENDPOINT",
}


@dataclass(frozen=True)
class Download:
    """What a CPU runtime replica of an hf:// model downloads before it starts."""

    repo: str
    commit: str
    layout: str
    files: tuple[tuple[str, int], ...]  # (name, bytes) the runtime reads
    # A bucket folder: each file's version as pinned at apply (s3://: versionId, or
    # etag:<ETag>; gs://: generation; Azure Blob: version id, or etag:<ETag>).
    versions: tuple[tuple[str, str], ...] = ()

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def shown(self) -> str:
        return self.repo if download_files.bucket_scheme(self.repo) else f"hf://{self.repo}"

    def as_dict(self) -> dict[str, Any]:
        planned: dict[str, Any] = {
            "repo": self.repo,
            "commit": self.commit,
            "layout": self.layout,
            "files": [list(f) for f in self.files],
        }
        if self.versions:
            planned["versions"] = [list(v) for v in self.versions]
        return planned


@dataclass(frozen=True)
class Plan:
    runtime: str  # "command", "vllm", or a CPU runtime's name
    model: str  # a model folder's absolute path, or a Hugging Face repo id
    revision: str | None
    why: str  # for Check model and the log: "... because ..."
    # An hf:// model on a CPU runtime: `model` is its snapshot folder, filled by this download.
    download: Download | None = None
    # What the model does (runtimes.GENERATE ...), for the first real request a replica must
    # answer before it reads Running; "" for the configured command, whose server is unknown.
    task: str = ""


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
    if info is None or info.scheme not in ("hf", "file", *BUCKET_READERS):
        return Refused(
            f"spec.source.model.uri is {uri}: the local backend serves hf:// models, s3://, "
            "gs:// and Azure Blob folders and file:// folders under its models folder; use a "
            "Kubernetes profile for other storage.",
            "spec.source.model.uri",
        )
    if info.scheme in BUCKET_READERS:
        bucket, key = split_url(info.text) if info.scheme == "https" else (info.bucket, info.key)
        return info.scheme, f"{info.scheme}://{bucket}/{(key or '').rstrip('/')}/", info.version
    if info.scheme == "file":
        try:
            folder = resolve_folder(info.file_path or "", configured_models_dir())
        except FolderRefused as exc:
            return Refused(str(exc), "spec.source.model.uri")
        return "file", str(folder), None
    return "hf", info.hf_repo or "", info.hf_revision


def adapter_folders(manifest: Mapping[str, Any]) -> list[tuple[str, str]] | Refused:
    """The LoRA adapters' (name, folder) as vLLM is given them: each file:// folder resolved
    and checked against the models folder as it is now (asked again before each start, as the
    model's). An hf:// or s3:// adapter is refused here: the local backend does not download
    adapters yet."""
    model = ((manifest.get("spec") or {}).get("source") or {}).get("model") or {}
    items = model.get("adapters") or []
    found: list[tuple[str, str]] = []
    for index, item in enumerate(items):
        path = f"{lora.PATH}[{index}].uri"
        text = item.get("uri") if isinstance(item, Mapping) else None
        try:
            info = parse_uri(text) if isinstance(text, str) else None
        except UriError as exc:
            return Refused(f"{path}: {exc.reason}. {exc.fix}", path)
        if info is None or info.scheme != "file":
            return Refused(
                f"{path} is {text}: the local backend serves adapters from file:// folders under "
                f"its models folder {configured_models_dir()} only (it does not download hf:// "
                "or s3:// adapters yet). Download the adapter's folder there and set uri to "
                "file://<that folder>, or deploy on a Kubernetes profile (hf://).",
                path,
            )
        try:
            folder = resolve_folder(info.file_path or "", configured_models_dir())
        except FolderRefused as exc:
            return Refused(str(exc).replace(URI, path), path)
        found.append((str(item["name"]), str(folder)))
    return found


def plan(
    manifest: Mapping[str, Any],
    template: str = DEFAULT_TEMPLATE,
    token: str | None = None,
    storage: Credentials | None = ANONYMOUS,
) -> Plan | Refused:
    """The server this machine runs the manifest with, or why none; with LoRA adapters, only
    vLLM (on a GPU, or its CPU build) or the configured command, from folders here."""
    chosen = _plan(manifest, template, token, storage)
    if isinstance(chosen, Refused) or not lora.names(manifest):
        return chosen
    if chosen.runtime not in (COMMAND, rt.VLLM, rt.VLLM_CPU.name):
        return Refused(lora.cpu_runtime_refusal(chosen.runtime), lora.PATH)
    folders = adapter_folders(manifest)
    return folders if isinstance(folders, Refused) else chosen


def _plan(
    manifest: Mapping[str, Any],
    template: str = DEFAULT_TEMPLATE,
    token: str | None = None,
    storage: Credentials | None = ANONYMOUS,
) -> Plan | Refused:
    """The server this machine runs the manifest with, or why none. `token` is the profile's
    Hugging Face token (None: none), read with for an hf:// model a CPU runtime serves;
    `storage`, its storage credentials for a bucket folder (None: not usable now)."""
    source = model_source(manifest)
    if isinstance(source, Refused):
        return source
    scheme, model, revision = source
    if template != DEFAULT_TEMPLATE and scheme in BUCKET_READERS:
        return Refused(
            f"spec.source.model.uri is {model}: the local backend downloads bucket folders for "
            "its own CPU runtimes, and SERVEDECK_LOCAL_COMMAND names another server; use an "
            "hf:// or file:// model with it, or a Kubernetes profile.",
            URI,
        )
    if template != DEFAULT_TEMPLATE:
        return Plan(COMMAND, model, revision, "SERVEDECK_LOCAL_COMMAND names the server.")
    vllm = rt.vllm_installed()
    runtimes_dir = rt.configured_runtimes_dir()
    if scheme == "hf":
        return _hub_plan(model, revision, token, on_gpu(manifest), vllm, runtimes_dir)
    if scheme in BUCKET_READERS:
        return _bucket_plan(scheme, model, storage, on_gpu(manifest), vllm, runtimes_dir)
    try:
        facts = folder_facts(Path(model), wants_gpu=on_gpu(manifest))
    except FolderRefused as exc:
        return Refused(str(exc), URI)
    choice = rt.choose_runtime(
        facts,
        vllm_installed=vllm,
        installed=rt.installed_runtimes(runtimes_dir),
        runtimes_dir=runtimes_dir,
        vllm_cpu=vllm_cpu_here(runtimes_dir),
    )
    if isinstance(choice, rt.Refusal):
        field = None if choice.install else "spec.source.model.uri"
        return Refused(choice.message, field)
    return Plan(choice.runtime, model, revision, choice.why, task=facts.task)


def _hub_plan(
    repo: str,
    revision: str | None,
    token: str | None,
    wants_gpu: bool,
    vllm: bool,
    runtimes_dir: Path,
) -> Plan | Refused:
    """An hf:// model: the server its task and layout get, read from the Hub as Check model
    reads it (a CTranslate2 Whisper is no vLLM model, wherever vLLM is installed); for a CPU
    runtime, the snapshot folder it will be downloaded into."""
    endpoint = hub.endpoint_now()
    try:
        found = repo_facts(repo, revision, token, endpoint=endpoint, wants_gpu=wants_gpu)
    except hub.HubUnavailable as exc:
        return Refused(
            f"spec.source.model.uri: the Hugging Face Hub at {endpoint} could not be reached to "
            f"read hf://{repo} ({exc}); the local backend reads its files to choose the server "
            "that runs it. Try again in a moment (check HF_ENDPOINT), or serve a model folder "
            f"from disk: put it under {configured_models_dir()} and use file://<that folder>.",
            None,
        )
    except hub.HubError as exc:
        gated = isinstance(exc, hub.AccessDenied)
        step = (
            "Accept the model's terms on its Hub page and give the profile an env/ token "
            "reference of that account."
            if gated
            else "Check the repository id and revision; Check model says more."
        )
        return Refused(f"spec.source.model.uri: hf://{repo} cannot be read: {exc}. {step}", URI)
    choice = rt.choose_runtime(
        found.facts,
        vllm_installed=vllm,
        installed=rt.installed_runtimes(runtimes_dir),
        runtimes_dir=runtimes_dir,
        vllm_cpu=vllm_cpu_here(runtimes_dir),
    )
    if isinstance(choice, rt.Refusal):
        return Refused(choice.message, None if choice.install else URI)
    if choice.runtime == rt.VLLM:
        return Plan(rt.VLLM, repo, revision, choice.why, task=found.facts.task)  # it downloads
    if not found.files:
        return Refused(f"spec.source.model.uri: hf://{repo} has no files its runtime reads.", URI)
    try:
        folder = download_files.snapshot_folder(rt.configured_downloads_dir(), repo, found.commit)
    except ValueError as exc:
        return Refused(f"spec.source.model.uri: {exc}.", URI)
    download = Download(repo, found.commit, found.facts.layout, found.files)
    why = f"{choice.why} It is downloaded from the Hub into {folder.parents[2]} first."
    return Plan(choice.runtime, str(folder), found.commit, why, download, found.facts.task)


def _bucket_plan(
    scheme: str,
    source: str,
    storage: Credentials | None,
    wants_gpu: bool,
    vllm: bool,
    runtimes_dir: Path,
) -> Plan | Refused:
    """An s3://, gs:// or Azure Blob folder: read with the profile's storage credentials as
    Check model reads it, served by the CPU runtime its task and layout get, from the snapshot
    of the files that runtime reads, each pinned now to its version (S3's versionId or ETag,
    GCS's generation, Azure's version id or ETag; the replica downloads exactly those)."""
    if storage is None:
        return Refused(
            f"spec.source.model.uri: {source} cannot be read: the profile's {CREDENTIALS_FIELD} "
            "is no longer allowed, or its variables are not set on the console's host; ask the "
            "operator, or set the profile's storageCredentials again.",
            None,
        )
    bucket, prefix = download_files.bucket_parts(source)
    reader = BUCKET_READERS[scheme](storage)
    try:
        folder = reader.folder(bucket, prefix)
        config = reader.read_json(folder, "config.json")
        names = folder.names
        index_files = None
        if download_files.checkpoint_safetensors(names) is None:
            index = reader.read_json(folder, hub_weights.INDEX_FILE)
            index_files, _ = hub_weights.index_contents(index)
        facts = model_facts(names, config, None, wants_gpu)
        choice = rt.choose_runtime(
            facts,
            vllm_installed=vllm,
            installed=rt.installed_runtimes(runtimes_dir),
            runtimes_dir=runtimes_dir,
        )
        if isinstance(choice, rt.Refusal):
            return Refused(choice.message, None if choice.install else URI)
        if choice.runtime == rt.VLLM:
            return Refused(
                f"spec.source.model.uri: {source} would be served by vLLM here, which the local "
                f"backend does not yet download {scheme}:// folders for; serve it on the CPU "
                "(remove "
                "resources.accelerator), or use a Kubernetes profile.",
                URI,
            )
        wanted = download_files.files_to_download(names, facts.layout, index_files)
        if not wanted:
            return Refused(f"spec.source.model.uri: {source} has no files its runtime reads.", URI)
        pins = reader.pins(folder, wanted)
    except StorageDenied as exc:
        return Refused(
            f"spec.source.model.uri: {source} cannot be read: {exc}. Set the profile's "
            f"{CREDENTIALS_FIELD} to credentials that may read it.",
            URI,
        )
    except StorageUnavailable as exc:
        return Refused(
            f"spec.source.model.uri: {source} could not be read ({exc}); try again in a moment "
            f"(check {ENDPOINT_SETTING[scheme]} on the console's host).",
            None,
        )
    except StorageError as exc:
        return Refused(f"spec.source.model.uri: {source}: {exc}.", URI)
    commit = download_files.folder_pin(pins)
    try:
        target = download_files.snapshot_folder(rt.configured_downloads_dir(), source, commit)
    except ValueError as exc:
        return Refused(f"spec.source.model.uri: {exc}.", URI)
    download = Download(
        source,
        commit,
        facts.layout,
        tuple((name, size) for name, size, _ in pins),
        tuple((name, version) for name, _, version in pins),
    )
    why = f"{choice.why} It is downloaded from {source} into {target.parents[2]} first."
    return Plan(choice.runtime, str(target), commit, why, download, facts.task)
