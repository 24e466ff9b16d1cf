"""hf:// LoRA adapters on the local backend: the runner fetches each adapter's own files
(serving_plan.adapter_downloads chose them and the commit) into the downloads folder's snapshot
of that commit, the Hugging Face cache layout the models' snapshots use, before any replica
loads it; vLLM is then given that folder (--lora-modules, or a run-time load).

An adapter is small (MAX_ADAPTER_BYTES at most, megabytes usually), so it is fetched where it
is applied rather than by each replica's launcher as a model's weights are; a snapshot already
complete is not fetched again.
"""

from __future__ import annotations

from pathlib import Path

from models_catalog import hub

from . import download_files
from . import runtimes as rt
from .machine_check import downloads_reserve, free_disk
from .serving_plan import AdapterDownload


class AdapterDownloadFailed(Exception):
    """The adapter could not be downloaded; the message names its field, what happened and
    what to do."""


def _complete(folder: Path, download: AdapterDownload) -> bool:
    return all(
        (folder / name).is_file() and (not size or (folder / name).stat().st_size == size)
        for name, size in download.files
    )


def fetch(download: AdapterDownload, token: str | None = None) -> Path:
    """The adapter's snapshot folder, its files downloaded from the Hub (HF_ENDPOINT as it is
    now, the profile's `token`) at the pinned commit when they are not there yet; raises
    AdapterDownloadFailed."""
    downloads = rt.configured_downloads_dir()
    folder = download_files.snapshot_folder(downloads, download.repo, download.commit)
    if _complete(folder, download):
        return folder
    shown = f"hf://{download.repo} at commit {download.commit}"
    try:
        downloads.mkdir(parents=True, exist_ok=True)
        refusal = download_files.disk_refusal(
            download.bytes, free_disk(downloads), downloads, shown, downloads_reserve(downloads)
        )
    except OSError as exc:
        refusal = f"the downloads folder {downloads} cannot be used ({exc.strerror or exc})"
    if refusal is not None:
        raise AdapterDownloadFailed(f"{download.field}: {refusal}")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    endpoint = hub.endpoint_now()
    try:
        snapshot_download(
            download.repo,
            revision=download.commit,
            cache_dir=str(downloads),
            allow_patterns=[name for name, _ in download.files],
            token=token or False,  # False: never a token saved on this machine
            endpoint=endpoint,
            library_name="servedeck",
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise AdapterDownloadFailed(
            f"{download.field}: {shown} could not be downloaded from the Hub at {endpoint} into "
            f"{downloads} ({type(exc).__name__}: {str(exc)[:200]}). Try again in a moment; if "
            "it keeps failing, check the repository on the Hub and the profile's token."
        ) from None
    if not _complete(folder, download):
        raise AdapterDownloadFailed(
            f"{download.field}: {shown} was downloaded, but {folder} does not hold its "
            f"{', '.join(name for name, _ in download.files)} at the sizes the Hub listed. "
            "Deploy again; if it keeps failing, check the repository's files on the Hub."
        )
    return folder
