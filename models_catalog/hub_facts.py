"""What the local backend needs to know of a Hub repository to serve it on a CPU runtime: the
runtime choice's facts (task, layout, parameters, experts), the commit, and the files that
runtime reads with their sizes. Read with Check model's own reads (hub.py: the repo's file
list and config.json, cached for a few minutes), so Check model and the local backend read
a repository once and the same way."""

from __future__ import annotations

from dataclasses import dataclass

import jobs.backends.local.download_files as download_files
import jobs.backends.local.model_files as model_files
import jobs.backends.local.runtimes as rt
from models_catalog import folders, hub, hub_weights


@dataclass(frozen=True)
class RepoFacts:
    repo: str
    commit: str
    facts: rt.ModelFacts
    files: tuple[tuple[str, int], ...]  # what the chosen layout's runtime downloads, sized

    @property
    def download_bytes(self) -> int:
        return sum(size for _, size in self.files)


def repo_facts(
    repo: str,
    revision: str | None,
    token: str | None,
    *,
    endpoint: str | None = None,
    wants_gpu: bool = False,
) -> RepoFacts:
    """The facts of `repo` at `revision` (main when None); raises hub.HubError as hub.py's
    reads do (gated, missing, unreachable)."""
    endpoint = hub.endpoint_now(endpoint)
    with hub.time_budget():
        info = hub.model_info(repo, revision, token, endpoint=endpoint)
        commit = info.sha or revision or ""
        config = hub.read_json(repo, "config.json", commit or None, token, endpoint=endpoint)
        names = info.file_names
        files_refusal = _files_refusal(repo, commit, token, endpoint, names)
        index_files = None
        if download_files.checkpoint_safetensors(names) is None:  # the index names the weights
            index_files, _ = hub_weights.index_files(repo, commit, token, endpoint)
    parameters = sum(info.safetensors.values()) if info.safetensors else None
    facts = folders.model_facts(names, config, parameters, wants_gpu, files_refusal)
    sizes = {file.name: file.size or 0 for file in info.siblings}
    wanted = download_files.files_to_download(names, facts.layout, index_files)
    return RepoFacts(repo, commit, facts, tuple((name, sizes[name]) for name in wanted))


def _files_refusal(
    repo: str, commit: str, token: str | None, endpoint: str, names: list[str]
) -> str | None:
    """model_files' refusal of the repository's files, read from the Hub as Check model reads
    them (only those it lists: a Sentence Transformers model's few small JSON files)."""
    listed = set(names)

    def read(name: str) -> object:
        if name not in listed:
            return model_files.MISSING
        try:
            found = hub.read_json(repo, name, commit or None, token, endpoint=endpoint)
        except hub.BadFile:
            return model_files.UNREADABLE
        return model_files.MISSING if found is None else found

    return model_files.refusal(read, f"hf://{repo}")
