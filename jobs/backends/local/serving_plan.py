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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobs.manifest import adapters as lora
from jobs.manifest.uri import UriError, UriInfo, parse_uri
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
    # Its hf:// LoRA adapters, downloaded by the runner at apply before any replica loads them.
    adapters: tuple[AdapterDownload, ...] = ()


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


@dataclass(frozen=True)
class AdapterDownload:
    """An hf:// LoRA adapter as the runner downloads it at apply (adapter_downloads.py): its
    own files only, at the commit its revision pointed at when it was planned."""

    index: int  # its place in spec.source.model.adapters
    name: str
    repo: str
    commit: str
    files: tuple[tuple[str, int], ...]  # (name, bytes)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def pin(self) -> dict[str, str]:
        """What the application's state keeps of it (AppState.adapter_pins[name])."""
        return {"repo": self.repo, "commit": self.commit}

    @property
    def field(self) -> str:
        return f"{lora.PATH}[{self.index}].uri"


def _adapter_items(manifest: Mapping[str, Any]) -> list[Any]:
    model = ((manifest.get("spec") or {}).get("source") or {}).get("model") or {}
    items = model.get("adapters") if isinstance(model, Mapping) else None
    return items if isinstance(items, list) else []


def adapter_folders(
    manifest: Mapping[str, Any], pins: Mapping[str, Mapping[str, Any]] | None = None
) -> list[tuple[str, str]] | Refused:
    """The LoRA adapters' (name, folder) as vLLM is given them: each file:// folder resolved
    and checked against the models folder as it is now, each hf:// adapter's snapshot in the
    downloads folder at the commit `pins` (name -> {repo, commit}) says it was pinned to and
    downloaded at apply, checked to be there; asked again before each start, as the model's.
    With `pins` None (the plan, before anything is pinned) an hf:// adapter is given as its
    uri. An s3:// adapter is refused here: the local backend does not download those."""
    found: list[tuple[str, str]] = []
    for index, item in enumerate(_adapter_items(manifest)):
        path = f"{lora.PATH}[{index}].uri"
        text = item.get("uri") if isinstance(item, Mapping) else None
        try:
            info = parse_uri(text) if isinstance(text, str) else None
        except UriError as exc:
            return Refused(f"{path}: {exc.reason}. {exc.fix}", path)
        if info is not None and info.scheme == "hf" and pins is None:
            found.append((str(item["name"]), info.text))
            continue
        if info is not None and info.scheme == "hf":
            folder = _hub_adapter_folder(str(item["name"]), info, pins or {}, path)
            if isinstance(folder, Refused):
                return folder
            found.append((str(item["name"]), folder))
            continue
        if info is None or info.scheme != "file":
            return Refused(
                f"{path} is {text}: the local backend serves adapters from hf:// repositories "
                f"and from file:// folders under its models folder {configured_models_dir()} "
                "(it does not download s3:// adapters). Put the adapter on the Hub or in a "
                "folder there, or deploy on a Kubernetes profile.",
                path,
            )
        try:
            folder = resolve_folder(info.file_path or "", configured_models_dir())
        except FolderRefused as exc:
            return Refused(str(exc).replace(URI, path), path)
        found.append((str(item["name"]), str(folder)))
    return found


def _hub_adapter_folder(
    name: str, info: UriInfo, pins: Mapping[str, Mapping[str, Any]], path: str
) -> str | Refused:
    """An hf:// adapter's snapshot folder, built again from the uri as it is now and the commit
    pinned at apply (checked: the same repository, a commit, inside the downloads folder)."""
    pin = pins.get(name) or {}
    repo, revision, commit = info.hf_repo or "", info.hf_revision, str(pin.get("commit", ""))
    pinned_elsewhere = (
        revision is not None and download_files.COMMIT.fullmatch(revision) and revision != commit
    )
    if pin.get("repo") != repo or pinned_elsewhere:
        return Refused(
            f"{path} is hf://{repo}, which was not downloaded when this revision was applied; "
            "deploy it again (the local backend downloads an hf:// adapter at apply).",
            path,
        )
    try:
        folder = download_files.snapshot_folder(rt.configured_downloads_dir(), repo, commit)
    except ValueError as exc:
        return Refused(f"{path}: {exc}.", path)
    if not (folder / download_files.ADAPTER_CONFIG).is_file():
        return Refused(
            f"{path}: hf://{repo} at commit {commit} is no longer in the downloads folder "
            f"({folder} is missing); deploy again to download it.",
            path,
        )
    return str(folder)


def adapter_downloads(
    manifest: Mapping[str, Any], token: str | None = None
) -> tuple[AdapterDownload, ...] | Refused:
    """The hf:// adapters of the manifest, each read from the Hub now (with the profile's
    `token`): the commit its revision points at, and the files vLLM reads of it with their
    sizes (download_files.adapter_files_to_download), bounded by MAX_ADAPTER_BYTES."""
    found: list[AdapterDownload] = []
    for index, item in enumerate(_adapter_items(manifest)):
        text = item.get("uri") if isinstance(item, Mapping) else None
        try:
            info = parse_uri(text) if isinstance(text, str) else None
        except UriError:
            continue  # adapter_folders names it
        if info is None or info.scheme != "hf":
            continue
        path = f"{lora.PATH}[{index}].uri"
        repo, endpoint = info.hf_repo or "", hub.endpoint_now()
        try:
            with hub.time_budget():
                read = hub.model_info(repo, info.hf_revision, token, endpoint=endpoint)
        except hub.HubUnavailable as exc:
            return Refused(
                f"{path}: the Hugging Face Hub at {endpoint} could not be reached to read "
                f"{info.text} ({exc}); the local backend downloads an hf:// adapter when it is "
                "applied. Try again in a moment (check HF_ENDPOINT).",
                None,
            )
        except hub.HubError as exc:
            return Refused(
                f"{path}: {info.text} cannot be read: {exc}. Check the repository id and "
                "revision (a private or gated one is read with the profile's token).",
                path,
            )
        names = download_files.adapter_files_to_download(read.file_names)
        if names is None:
            return Refused(
                f"{path}: {info.text} has no {download_files.ADAPTER_CONFIG} and "
                f"{download_files.ADAPTER_WEIGHTS}; accepts a PEFT LoRA adapter saved with "
                "safetensors (peft's save_pretrained). Save it again, or point uri at the "
                "adapter's own repository.",
                path,
            )
        if not download_files.COMMIT.fullmatch(read.sha or ""):
            return Refused(f"{path}: the Hub named no commit for {info.text}; try again.", None)
        sizes = {file.name: file.size or 0 for file in read.siblings}
        download = AdapterDownload(
            index, str(item["name"]), repo, read.sha, tuple((n, sizes[n]) for n in names)
        )
        if download.bytes > download_files.MAX_ADAPTER_BYTES:
            return Refused(
                f"{path}: {info.text}'s files come to {rt.size_text(download.bytes)}, more than "
                f"the {rt.size_text(download_files.MAX_ADAPTER_BYTES)} an adapter may download; "
                "a LoRA adapter is far smaller: point uri at the adapter, not a full model.",
                path,
            )
        found.append(download)
    return tuple(found)


def plan(
    manifest: Mapping[str, Any],
    template: str = DEFAULT_TEMPLATE,
    token: str | None = None,
    storage: Credentials | None = ANONYMOUS,
) -> Plan | Refused:
    """The server this machine runs the manifest with, or why none; with LoRA adapters, only
    vLLM (on a GPU, or its CPU build) or the configured command, from folders here and hf://
    repositories (read now: the commit each is pinned to, and its files)."""
    chosen = _plan(manifest, template, token, storage)
    if isinstance(chosen, Refused) or not lora.names(manifest):
        return chosen
    if chosen.runtime not in (COMMAND, rt.VLLM, rt.VLLM_CPU.name):
        return Refused(lora.cpu_runtime_refusal(chosen.runtime), lora.PATH)
    folders = adapter_folders(manifest)  # the folders' checks need no network
    if isinstance(folders, Refused):
        return folders
    downloads = adapter_downloads(manifest, token)
    if isinstance(downloads, Refused):
        return downloads
    return replace(chosen, adapters=downloads)


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
