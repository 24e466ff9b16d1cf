"""Reads from the Hugging Face Hub for Check model and search, through the real huggingface_hub
client: a short time budget, plain errors, bounded file reads, a few minutes' cache. What a
repository's weights are (safetensors headers, never the weights) is read by hub_weights.py.

The endpoint is HF_ENDPOINT read at call time (huggingface_hub reads it once, at import).
Calls go through huggingface_hub's own session, URL builder and error mapping; list_models and
hf_hub_download are not used because they retry with back-off for ~20 s on network errors
(list_models takes no timeout) and hf_hub_download writes every file to the disk cache.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import httpx2  # huggingface_hub's HTTP library: its timeouts and transport errors
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ModelInfo
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from models_catalog import safetensors_header as headers
from models_catalog.hub_cache import AnswerCache

DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT = 3.0  # seconds to open a connection
TIME_BUDGET = 5.0  # seconds for everything one call (or one `time_budget` block) reads
# The operator's own budget, read at call time like HF_ENDPOINT: a slow link to a mirror, or a
# loaded test machine talking to its fake Hub. A positive number of seconds, at most 300.
TIME_BUDGET_ENV = "SERVEDECK_HUB_TIME_BUDGET"
CACHE_SECONDS = 300.0
CACHE_MAX_ENTRIES = 512  # answers kept; autocomplete alone asks once per typed prefix
CACHE_MAX_BYTES = 32 << 20  # all answers together (one big safetensors index is a few MB)
MAX_JSON_BYTES = 64 << 20
LIBRARY = "servedeck"
SEARCH_FIELDS = ("downloads", "likes", "pipeline_tag", "gated", "lastModified", "library_name")

T = TypeVar("T")


# ---- errors ----


class HubError(Exception):
    """Something about the Hub or a repo that stops the answer; `str()` says it in plain words."""

    def __init__(self, message: str, *, endpoint: str, repo: str | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.repo = repo


class RepoNotFound(HubError):
    """No such repo, or it is private and the token cannot see it (the Hub does not say which)."""


class RevisionNotFound(HubError):
    def __init__(self, message: str, *, endpoint: str, repo: str, revision: str) -> None:
        super().__init__(message, endpoint=endpoint, repo=repo)
        self.revision = revision


class AccessDenied(HubError):
    """The Hub refused the token for this repo."""

    def __init__(self, message: str, *, endpoint: str, repo: str | None, has_token: bool) -> None:
        super().__init__(message, endpoint=endpoint, repo=repo)
        self.has_token = has_token


class GatedRepo(AccessDenied):
    """A gated repo: no token was given, or the token's account has not been granted access."""


class InvalidToken(HubError):
    """The Hub rejected the token itself (wrong, expired or revoked)."""


class HubUnavailable(HubError):
    """The Hub did not answer in time, could not be reached, or failed on its side."""


class BadFile(HubError):
    """A file the check reads is not what its name promises (JSON that does not parse, ...)."""


# ---- what the Hub says ----


@dataclass(frozen=True)
class HubModel:
    """One search result."""

    id: str
    downloads: int | None
    likes: int | None
    pipeline_tag: str | None
    gated: str | bool | None
    last_modified: datetime | None


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int | None  # bytes, when the Hub sent sizes


@dataclass(frozen=True)
class HubModelInfo:
    id: str
    sha: str  # the commit the revision points at
    revision: str | None  # as asked; None means main
    gated: str | bool | None  # False, "auto" or "manual"
    private: bool | None
    pipeline_tag: str | None
    tags: tuple[str, ...]
    library: str | None
    siblings: tuple[HubFile, ...]
    safetensors: dict[str, int] | None  # parameters per dtype, as the Hub summarises the headers
    last_modified: datetime | None

    @property
    def file_names(self) -> list[str]:
        return [file.name for file in self.siblings]

    def size_of(self, names: Sequence[str]) -> int | None:
        sizes = {file.name: file.size for file in self.siblings}
        if any(sizes.get(name) is None for name in names):
            return None
        return sum(sizes[name] for name in names)  # type: ignore[misc]


# ---- endpoint, time budget, cache ----


def endpoint_now(endpoint: str | None = None) -> str:
    """The Hub to talk to: the argument, else HF_ENDPOINT as it is now, else huggingface.co."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


@dataclass(frozen=True)
class _Budget:
    deadline: float
    connect: float
    seconds: float


_budget: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("hub_budget", default=None)


def default_budget() -> float:
    """TIME_BUDGET, or SERVEDECK_HUB_TIME_BUDGET where it holds a number of seconds in (0, 300]
    (anything else is ignored: a budget never becomes unbounded)."""
    try:
        seconds = float(os.environ.get(TIME_BUDGET_ENV, ""))
    except ValueError:
        return TIME_BUDGET
    return seconds if 0 < seconds <= 300 else TIME_BUDGET


@contextmanager
def time_budget(seconds: float | None = None, connect: float | None = None) -> Iterator[None]:
    """Every Hub read inside shares one deadline (default_budget() seconds, CONNECT_TIMEOUT to
    connect, unless given); a nested budget never extends an outer one."""
    seconds = default_budget() if seconds is None else seconds
    connect = CONNECT_TIMEOUT if connect is None else connect
    outer = _budget.get()
    deadline = time.monotonic() + seconds
    if outer is not None and outer.deadline <= deadline:
        budget = outer
    else:
        budget = _Budget(deadline, min(connect, outer.connect) if outer else connect, seconds)
    marker = _budget.set(budget)
    try:
        yield
    finally:
        _budget.reset(marker)


def _timeout(endpoint: str) -> httpx2.Timeout:
    budget = _budget.get()
    assert budget is not None, "Hub reads run inside time_budget()"
    left = budget.deadline - time.monotonic()
    if left <= 0:
        raise HubUnavailable(f"no answer within {budget.seconds:g} s", endpoint=endpoint)
    return httpx2.Timeout(left, connect=min(budget.connect, left))


# The limits are read at each store, so a test or an operator's shell can change them.
_cache = AnswerCache(
    ttl=lambda: CACHE_SECONDS,
    max_entries=lambda: CACHE_MAX_ENTRIES,
    max_bytes=lambda: CACHE_MAX_BYTES,
)


def clear_cache() -> None:
    """Forget every cached answer (tests, and after a token changes)."""
    _cache.clear()


def token_key(token: str | None) -> str:
    """A token as part of a cache key: a short hash, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()[:16] if token else ""


def cached(key: tuple, compute: Callable[[], T]) -> T:
    """The answer kept under `key`, else compute()'s (hub_cache.AnswerCache)."""
    return _cache.get_or_compute(key, compute)


@contextmanager
def hub_call(endpoint: str, repo: str | None, token: str | None, revision: str | None = None):
    """Run Hub reads under a time budget and turn the client's errors into ours."""
    with time_budget():
        try:
            yield
        except HubError:
            raise
        except Exception as exc:
            translated = _translate(exc, endpoint, repo, token, revision)
            if translated is None:
                raise
            raise translated from exc


def _translate(
    exc: Exception, endpoint: str, repo: str | None, token: str | None, revision: str | None
) -> HubError | None:
    where = {"endpoint": endpoint, "repo": repo}
    if isinstance(exc, GatedRepoError):
        return GatedRepo(f"{repo} is gated", **where, has_token=bool(token))
    if isinstance(exc, RevisionNotFoundError):
        return RevisionNotFound(
            f"{repo} has no revision {revision!r}",
            endpoint=endpoint,
            repo=repo or "",
            revision=revision or "main",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return RepoNotFound(f"{repo} was not found on {endpoint}", **where)
    if isinstance(exc, OfflineModeIsEnabled):
        return HubUnavailable("offline mode is on (HF_HUB_OFFLINE)", **where)
    if isinstance(exc, httpx2.TimeoutException):
        budget = _budget.get()
        seconds = f" within {budget.seconds:g} s" if budget else ""
        return HubUnavailable(f"no answer{seconds}", **where)
    if isinstance(exc, httpx2.TransportError):
        return HubUnavailable(f"{type(exc).__name__}: {exc}", **where)
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return _translate_status(exc.response.status_code, where, token)
    if isinstance(exc, ValueError):  # a 200 that is not the Hub's JSON: a web page, a proxy
        return HubUnavailable(
            "the answer is not the Hub's JSON; is this a Hugging Face Hub?", **where
        )
    return None


def _translate_status(status: int, where: dict, token: str | None) -> HubError:
    if status == 401 and token:
        return InvalidToken("the Hub rejected the Hugging Face token", **where)
    if status in (401, 403):
        return AccessDenied("the Hub refused access", **where, has_token=bool(token))
    if status == 429:
        return HubUnavailable("the Hub is rate limiting requests (HTTP 429)", **where)
    if status >= 500:
        return HubUnavailable(f"the Hub failed with HTTP {status}", **where)
    return HubError(f"the Hub answered HTTP {status}", **where)


def _headers(token: str | None, extra: dict | None = None) -> dict[str, str]:
    # token=False stops huggingface_hub from using a token saved on this machine.
    return build_hf_headers(token=token or False, library_name=LIBRARY, headers=extra)


def _get(url: str, endpoint: str, token: str | None, params: dict | None = None) -> httpx2.Response:
    response = get_session().get(
        url, headers=_headers(token), params=params, timeout=_timeout(endpoint)
    )
    hf_raise_for_status(response)
    return response


# ---- public reads ----


def search(
    query: str, limit: int = 20, token: str | None = None, *, endpoint: str | None = None
) -> list[HubModel]:
    """Models whose id matches `query`, most downloaded first."""
    endpoint = endpoint_now(endpoint)
    params = {
        "search": query,
        "limit": limit,
        "sort": "downloads",
        "direction": -1,
        "expand": list(SEARCH_FIELDS),
    }

    def fetch() -> list[HubModel]:
        with hub_call(endpoint, None, token):
            items = _get(f"{endpoint}/api/models", endpoint, token, params).json()
        return [_hub_model(ModelInfo(**item)) for item in items[:limit]]

    return cached(("search", endpoint, query, limit, token_key(token)), fetch)


def _hub_model(info: ModelInfo) -> HubModel:
    return HubModel(
        id=info.id,
        downloads=info.downloads,
        likes=info.likes,
        pipeline_tag=info.pipeline_tag,
        gated=info.gated,
        last_modified=info.last_modified,
    )


def model_info(
    repo: str, revision: str | None = None, token: str | None = None, *, endpoint: str | None = None
) -> HubModelInfo:
    """The repo's metadata at `revision` (main when None): commit, gating, files with sizes."""
    endpoint = endpoint_now(endpoint)

    def fetch() -> HubModelInfo:
        api = HfApi(endpoint=endpoint, token=token or False, library_name=LIBRARY)
        with hub_call(endpoint, repo, token, revision):
            info = api.model_info(
                repo,
                revision=revision,
                files_metadata=True,
                timeout=_timeout(endpoint),
                token=token or False,
            )
        try:
            return _model_info(info, revision)
        except headers.HeaderRefused as exc:
            raise BadFile(str(exc).rstrip("."), endpoint=endpoint, repo=repo) from None

    return cached(("info", endpoint, repo, revision, token_key(token)), fetch)


def _model_info(info: ModelInfo, revision: str | None) -> HubModelInfo:
    siblings = tuple(HubFile(s.rfilename, s.size) for s in info.siblings or ())
    return HubModelInfo(
        id=info.id,
        sha=info.sha or "",
        revision=revision,
        gated=info.gated,
        private=info.private,
        pipeline_tag=info.pipeline_tag,
        tags=tuple(info.tags or ()),
        library=info.library_name,
        siblings=siblings,
        safetensors=(
            headers.summary_parameters(
                info.safetensors.parameters, f"the Hub's safetensors summary of {info.id}"
            )
            if info.safetensors
            else None
        ),
        last_modified=info.last_modified,
    )


def read_json(
    repo: str,
    filename: str,
    revision: str | None = None,
    token: str | None = None,
    *,
    endpoint: str | None = None,
) -> dict | list | None:
    """A JSON file of the repo (config.json, tokenizer_config.json, modules.json, ...), or None
    when the repo has no such file."""
    endpoint = endpoint_now(endpoint)

    def fetch() -> dict | list | None:
        url = hf_hub_url(repo, filename, revision=revision or "main", endpoint=endpoint)
        with hub_call(endpoint, repo, token, revision):
            try:
                body = read_bounded(url, endpoint, token, 0, MAX_JSON_BYTES - 1, ranged=False)
            except RemoteEntryNotFoundError:
                return None
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:  # nested deeper than the parser goes
            raise BadFile(
                f"{filename} of {repo} is not valid JSON ({exc})", endpoint=endpoint, repo=repo
            ) from exc

    return cached(("json", endpoint, repo, revision, filename, token_key(token)), fetch)


def read_bounded(
    url: str, endpoint: str, token: str | None, start: int, end: int, *, ranged: bool = True
) -> bytes:
    """Bytes start..end (inclusive) of a file, streamed and cut off there: a server that
    ignores the Range header still never sends more than that through this client."""
    extra = {"Range": f"bytes={start}-{end}"} if ranged else None
    request = get_session().stream(
        "GET", url, headers=_headers(token, extra), timeout=_timeout(endpoint)
    )
    with request as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        wanted = end - start + 1
        if (
            response.status_code == 206
            and int(response.headers.get("content-length", -1)) <= wanted
        ):
            return response.read()  # read to the end, so the connection can be reused
        skip = start if response.status_code == 200 else 0  # Range ignored: skip to start
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) >= skip + wanted:
                break
    return bytes(data[skip : skip + wanted])
