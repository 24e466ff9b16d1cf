"""Check model for LoRA adapters (spec.source.model.adapters): each adapter's
adapter_config.json read through the same clients as the model's files (huggingface_hub for
hf://, boto3 for s3://, the models folder for file://) and held to the rules of
jobs.manifest.adapters.config_problems (base model, rank, target modules).

Answers (field path, sentence) refusals; the dry run adds them with origin check-model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobs.manifest.adapters import CONFIG_FILE, Adapter, config_problems
from jobs.manifest.adapters import PATH as ADAPTERS_PATH
from jobs.manifest.uri import UriInfo
from jobs.storage_access import ANONYMOUS, CREDENTIALS_FIELD, Credentials
from models_catalog import hub
from models_catalog.folders import (
    URI_FIELD,
    FolderRefused,
    configured_models_dir,
    read_json,
    resolve_folder,
)
from models_catalog.s3_reads import S3Reader, StorageDenied, StorageError


class Unreadable(Exception):
    """The adapter's config could not be read; the message says why and what to do."""


def base_id(base: UriInfo | None) -> str | None:
    """What an adapter's base_model_name_or_path is compared with: the Hub repo id of an hf://
    model, the resolved folder of a file:// one (None: an s3:// model, not compared)."""
    if base is None:
        return None
    if base.scheme == "hf":
        return base.hf_repo
    if base.scheme == "file" and base.file_path:
        try:
            return str(resolve_folder(base.file_path, configured_models_dir()))
        except FolderRefused:
            return None
    return None


def check_adapters(
    adapters: Sequence[Adapter],
    base: UriInfo | None,
    *,
    hf_token: str | None = None,
    hf_endpoint: str | None = None,
    storage: Credentials = ANONYMOUS,
) -> list[tuple[str, str]]:
    """(field path, sentence) for each adapter that cannot be served with the model at `base`."""
    found: list[tuple[str, str]] = []
    expected = base_id(base)
    for adapter in adapters:
        path = f"{ADAPTERS_PATH}[{adapter.index}].uri"
        try:
            config = _read_config(adapter.uri, path, hf_token, hf_endpoint, storage)
        except Unreadable as exc:
            found.append((path, str(exc)))
            continue
        if config is None:
            found.append(
                (
                    path,
                    f"{adapter.uri.text} has no {CONFIG_FILE}; accepts a PEFT LoRA adapter's "
                    "folder (adapter_config.json and adapter_model.safetensors). Point uri at "
                    "the folder peft's save_pretrained wrote.",
                )
            )
            continue
        for sentence in config_problems(config, expected, adapter.index):
            found.append((path, sentence.removeprefix(f"{path}: ")))
    return found


def _read_config(
    uri: UriInfo, path: str, token: str | None, endpoint: str | None, storage: Credentials
) -> Any:
    if uri.scheme == "hf":
        endpoint = hub.endpoint_now(endpoint)
        try:
            with hub.time_budget():
                return hub.read_json(
                    uri.hf_repo or "", CONFIG_FILE, uri.hf_revision, token, endpoint=endpoint
                )
        except hub.HubError as exc:
            raise Unreadable(
                f"{uri.text} cannot be read from the Hub at {endpoint}: {exc}. Check the "
                "repository id and revision (a private or gated one is read with the profile's "
                "token)."
            ) from None
    if uri.scheme == "s3":
        try:
            reader = S3Reader(storage)
            folder = reader.folder(uri.bucket or "", uri.key or "")
            return reader.read_json(folder, CONFIG_FILE)
        except StorageDenied as exc:
            raise Unreadable(
                f"{uri.text} cannot be read: {exc}. Set the profile's {CREDENTIALS_FIELD} to "
                "credentials that may read it."
            ) from None
        except StorageError as exc:
            raise Unreadable(
                f"{uri.text} cannot be read: {exc}. Check the bucket and key."
            ) from None
    try:
        folder = resolve_folder(uri.file_path or "", configured_models_dir())
    except FolderRefused as exc:
        raise Unreadable(str(exc).replace(URI_FIELD, path)) from None
    return read_json(Path(folder) / CONFIG_FILE)
