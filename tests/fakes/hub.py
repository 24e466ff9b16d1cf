"""A stand-in for the Hugging Face Hub that the real `huggingface_hub` client talks to through
`endpoint=` (or HF_ENDPOINT): model info and search, file resolve with the Hub's headers and
error codes, Range reads of synthesized safetensors files, gated and missing repos, and a log
of every request with the bytes it sent.

Repos come from `hub_repos/<org>/<name>/`: the JSON files there are served as they are,
`_repo.json` holds the Hub's metadata and says which weights to synthesize (headers real,
data zeros, never materialised) and which other large files exist (by size only). A repo can
also be a real model folder on disk (`disk_repo`: the packaged models of
tests/packaged_models.py), every file served as it is, with the Hub's headers (commit, ETag,
the LFS sha256 of large files), so `snapshot_download` fetches real weights from it.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes.hub_repos.layouts import LAYOUTS

REPOS_DIR = Path(__file__).with_name("hub_repos")
GOOD_TOKEN = "hf_fake_token_with_access"  # may read every gated repo
NO_ACCESS_TOKEN = "hf_fake_token_without_access"  # valid, but never granted a gated repo
CHUNK = 1 << 20
DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8,
              "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8, "BOOL": 8}  # fmt: skip


# ---- files ----


class FakeFile:
    """A file's bytes, produced on demand for any range."""

    size: int
    lfs = False

    def read(self, start: int, end: int) -> bytes:  # end inclusive
        raise NotImplementedError

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        position = start
        while position <= end:
            stop = min(end, position + CHUNK - 1)
            yield self.read(position, stop)
            position = stop + 1

    @cached_property
    def etag(self) -> str:
        return hashlib.sha256(
            self.read(0, min(self.size, 4096) - 1) + str(self.size).encode()
        ).hexdigest()


class InlineFile(FakeFile):
    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)

    def read(self, start: int, end: int) -> bytes:
        return self.data[start : end + 1]

    @cached_property
    def etag(self) -> str:  # a git blob id, as the Hub sends for small files
        return hashlib.sha1(b"blob %d\0" % self.size + self.data).hexdigest()  # noqa: S324


class LazyInlineFile(InlineFile):
    """Small-ish generated content (an index) built on first read."""

    def __init__(self, build) -> None:
        self._build = build

    @cached_property
    def data(self) -> bytes:  # type: ignore[override]
        return self._build()

    @property
    def size(self) -> int:  # type: ignore[override]
        return len(self.data)


class BlobFile(FakeFile):
    """A large file known by its size only: zeros."""

    lfs = True

    def __init__(self, size: int) -> None:
        self.size = size

    def read(self, start: int, end: int) -> bytes:
        return bytes(max(0, min(end, self.size - 1) - start + 1))


class SafetensorsFile(FakeFile):
    """A valid safetensors file: a real header over zero-filled tensor data."""

    lfs = True

    def __init__(self, tensors: list[tuple[str, str, list[int]]]) -> None:
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        self.counts: dict[str, int] = {}
        for name, dtype, shape in tensors:
            count = _product(shape)
            length = (count * DTYPE_BITS[dtype] + 7) // 8
            header[name] = {
                "dtype": dtype,
                "shape": shape,
                "data_offsets": [offset, offset + length],
            }
            self.counts[dtype] = self.counts.get(dtype, 0) + count
            offset += length
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes
        self.head = struct.pack("<Q", len(text)) + text
        self.data_bytes = offset
        self.size = len(self.head) + offset
        self.names = [name for name, _, _ in tensors]

    def read(self, start: int, end: int) -> bytes:
        end = min(end, self.size - 1)
        head = self.head[start : end + 1] if start < len(self.head) else b""
        return head + bytes(max(0, end - max(start, len(self.head)) + 1))


class DiskFile(FakeFile):
    """A real file on disk, read for any range; large files are LFS files, as on the Hub."""

    LFS_FROM_BYTES = 1 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self.lfs = self.size >= self.LFS_FROM_BYTES or path.suffix in (".safetensors", ".bin")

    def read(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as handle:
            handle.seek(start)
            return handle.read(max(0, min(end, self.size - 1) - start + 1))

    @cached_property
    def etag(self) -> str:
        if not self.lfs:  # a git blob id, as the Hub sends for small files
            return hashlib.sha1(b"blob %d\0" % self.size + self.path.read_bytes()).hexdigest()  # noqa: S324
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            for block in iter(lambda: handle.read(CHUNK), b""):
                digest.update(block)
        return digest.hexdigest()


def _product(shape: list[int]) -> int:
    result = 1
    for dim in shape:
        result *= dim
    return result


# ---- repos ----


@dataclass
class FakeRepo:
    id: str
    directory: Path
    meta: dict
    _files: dict[str, FakeFile] | None = field(default=None, repr=False)
    _summary: dict[str, int] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.id.encode()).hexdigest()  # noqa: S324

    @property
    def gated(self):
        return self.meta.get("gated", False)

    @property
    def files(self) -> dict[str, FakeFile]:
        with self._lock:
            if self._files is None:
                self._files, self._summary = self._build()
            return self._files

    @property
    def safetensors_summary(self) -> dict[str, int] | None:
        self.files  # noqa: B018 - builds the summary with the files
        return self._summary

    def _build(self) -> tuple[dict[str, FakeFile], dict[str, int] | None]:
        files: dict[str, FakeFile] = {".gitattributes": InlineFile(b"*.safetensors filter=lfs\n")}
        if self.meta.get("from_disk"):
            for path in sorted(self.directory.rglob("*")):
                name = path.relative_to(self.directory).as_posix()
                if path.is_file() and not name.startswith("."):
                    files[name] = DiskFile(path)
            for name, size in self.meta.get("blobs", {}).items():
                files[name] = BlobFile(size)  # copies a runtime must not fetch
            return files, None
        for path in sorted(self.directory.rglob("*")):
            if path.is_file() and path.name != "_repo.json":
                files[path.relative_to(self.directory).as_posix()] = InlineFile(path.read_bytes())
        for name, size in self.meta.get("blobs", {}).items():
            files[name] = BlobFile(size)
        summary = self.meta.get("hub_safetensors")
        specs = self.meta.get("weights", [])
        config = json.loads((self.directory / "config.json").read_text()) if specs else {}
        for index, spec in enumerate(specs):
            counts = self._add_weights(files, spec, config)
            if index == 0:
                summary = counts
        return files, summary

    @staticmethod
    def _add_weights(files: dict[str, FakeFile], spec: dict, config: dict) -> dict[str, int]:
        layout = LAYOUTS[spec["layout"]]
        tensors = layout(config, spec["dtype"]) if "dtype" in spec else layout(config)
        shards = {spec["file"]: tensors} if "file" in spec else _shard(tensors, spec)
        built = {name: SafetensorsFile(part) for name, part in shards.items()}
        files.update(built)
        if "file" not in spec:
            files["model.safetensors.index.json"] = LazyInlineFile(lambda: _index(built))
        return _sum_counts(built.values())


def _sum_counts(files) -> dict[str, int]:
    total: dict[str, int] = {}
    for file in files:
        for dtype, count in file.counts.items():
            total[dtype] = total.get(dtype, 0) + count
    return total


def _shard(tensors: list, spec: dict) -> dict[str, list]:
    """Split tensors in order into `shards` files of about equal bytes, named by `pattern`."""
    count, first = spec["shards"], spec.get("first", 1)
    sizes = [_product(shape) * DTYPE_BITS[dtype] // 8 for _, dtype, shape in tensors]
    target = sum(sizes) / count
    parts: list[list] = [[]]
    filled = 0
    for tensor, size in zip(tensors, sizes, strict=True):
        if filled >= target * len(parts) and len(parts) < count:
            parts.append([])
        parts[-1].append(tensor)
        filled += size
    while len(parts) < count:  # tiny models: keep the promised number of files
        parts.append([parts[-2].pop()])
    names = [
        spec["pattern"].format(index=first + i, count=count, last=first + count - 1)
        for i in range(count)
    ]
    return dict(zip(names, parts, strict=True))


def _index(shards: dict[str, SafetensorsFile]) -> bytes:
    weight_map = {name: file for file, shard in shards.items() for name in shard.names}
    total = sum(shard.data_bytes for shard in shards.values())
    body = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return json.dumps(body, indent=2).encode()


def disk_repo(repo_id: str, folder: Path, **meta) -> FakeRepo:
    """A repo serving the real model folder `folder` (gated=..., blobs={name: size} for other
    files it lists, such as the ONNX copies real repos carry)."""
    return FakeRepo(repo_id, Path(folder), {"from_disk": True, **meta})


def load_repos(directory: Path = REPOS_DIR) -> dict[str, FakeRepo]:
    repos = {}
    for meta_path in sorted(directory.glob("*/*/_repo.json")):
        repo_dir = meta_path.parent
        repo_id = f"{repo_dir.parent.name}/{repo_dir.name}"
        repos[repo_id] = FakeRepo(repo_id, repo_dir, json.loads(meta_path.read_text()))
    return repos


# ---- the server ----


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    status: int
    range: str | None
    bytes: int  # everything written back: status line, headers and body
    token: bool  # whether the request carried a token (never the token itself)


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeHub:
    """The fake Hub: `with FakeHub().serve() as hub:` then point the client at `hub.url`."""

    def __init__(
        self, repos: dict[str, FakeRepo] | None = None, *, hub_summaries: bool = True
    ) -> None:
        self.repos = load_repos() if repos is None else repos
        self.hub_summaries = hub_summaries  # False: model info omits "safetensors"
        self.ignore_ranges = False  # True: answer Range requests with the whole file, as some
        # servers do, to show a client stops reading on its own
        self.tokens = {GOOD_TOKEN: True, NO_ACCESS_TOKEN: False}
        # {file name: seconds} before each answer about that file: a download that takes a while
        self.slow_files: dict[str, float] = {}
        self._log: list[RequestRecord] = []
        self._in_flight = 0
        self._log_changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake Hub is not running: use serve()"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def prepare(self) -> None:
        """Build every repo's synthesized files now rather than on first request."""
        for repo in self.repos.values():
            repo.files  # noqa: B018

    @contextmanager
    def serve(self) -> Iterator[FakeHub]:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)
            self._server = None

    # the log: a client can hold its whole answer before the handler logs it, so reading the
    # log first waits (briefly) for requests in flight
    def started(self) -> None:
        with self._log_changed:
            self._in_flight += 1

    def record(self, entry: RequestRecord) -> None:
        with self._log_changed:
            self._log.append(entry)
            self._in_flight -= 1
            self._log_changed.notify_all()

    def _settled(self) -> list[RequestRecord]:
        with self._log_changed:
            self._log_changed.wait_for(lambda: self._in_flight == 0, timeout=5)
            return list(self._log)

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request answered so far, oldest first."""
        return self._settled()

    def reset_log(self) -> None:
        self._settled()
        with self._log_changed:
            self._log.clear()

    def bytes_sent(self) -> int:
        return sum(entry.bytes for entry in self._settled())

    # answers
    def access(self, token: str | None) -> bool | None:
        """None: anonymous; True/False: a known token with or without gated access."""
        if token is None:
            return None
        if token not in self.tokens:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return self.tokens[token]

    def repo(self, repo_id: str, token: str | None) -> FakeRepo:
        repo = self.repos.get(repo_id)
        if repo is None:
            status = 404 if token else 401
            raise HubError(status, "RepoNotFound", "Repository not found")
        return repo

    @staticmethod
    def check_revision(repo: FakeRepo, revision: str) -> None:
        if revision not in ("main", repo.sha):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")

    def check_gate(self, repo: FakeRepo, access: bool | None) -> None:
        if not repo.gated or access:
            return
        if access is None:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo.id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
        raise HubError(
            403,
            "GatedRepo",
            f"Access to model {repo.id} is restricted and you are not in the authorized list. "
            f"Visit {self.url}/{repo.id} to ask for access.",
        )

    def model_json(self, repo: FakeRepo, *, blobs: bool) -> dict:
        meta = repo.meta
        siblings = [self._sibling(name, file, blobs) for name, file in sorted(repo.files.items())]
        body = {
            "_id": repo.sha[:24],
            "id": repo.id,
            "modelId": repo.id,
            "author": repo.id.split("/")[0],
            "sha": repo.sha,
            "lastModified": meta.get("lastModified"),
            "createdAt": meta.get("lastModified"),
            "private": False,
            "disabled": False,
            "gated": repo.gated,
            "downloads": meta.get("downloads", 0),
            "likes": meta.get("likes", 0),
            "library_name": meta.get("library_name"),
            "tags": meta.get("tags", []),
            "pipeline_tag": meta.get("pipeline_tag"),
            "siblings": siblings,
            "usedStorage": sum(file.size for file in repo.files.values()),
        }
        summary = repo.safetensors_summary
        if self.hub_summaries and summary:
            body["safetensors"] = {"parameters": summary, "total": sum(summary.values())}
        return body

    @staticmethod
    def _sibling(name: str, file: FakeFile, blobs: bool) -> dict:
        if not blobs:
            return {"rfilename": name}
        entry = {"rfilename": name, "size": file.size, "blobId": file.etag[:40]}
        if file.lfs:
            entry["lfs"] = {"size": file.size, "sha256": file.etag, "pointerSize": 135}
        return entry

    def search(self, query: str, limit: int) -> list[dict]:
        found = [repo for repo in self.repos.values() if query.lower() in repo.id.lower()]
        found.sort(key=lambda repo: -repo.meta.get("downloads", 0))
        keys = (
            "id",
            "modelId",
            "downloads",
            "likes",
            "gated",
            "lastModified",
            "pipeline_tag",
            "library_name",
            "tags",
            "private",
        )
        return [
            {key: value for key, value in self.model_json(repo, blobs=False).items() if key in keys}
            for repo in found[:limit]
        ]


class _CountingWriter:
    def __init__(self, raw) -> None:
        self.raw, self.count = raw, 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self.raw.write(data)

    def __getattr__(self, name: str):  # closed, close, ... as the socket writer has them
        return getattr(self.raw, name)


_INFO = re.compile(r"/api/models/([^/]+/[^/]+?)(?:/revision/(.+))?")
_TREE = re.compile(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?")
_RESOLVE = re.compile(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every response, which the real Hub does not.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wfile = _CountingWriter(self.wfile)
        self._status = 0

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def do_GET(self) -> None:
        self._handle(head=False)

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def _handle(self, head: bool) -> None:
        self.hub.started()
        before = self.wfile.count
        token = self._token()
        try:
            self._route(head, token)
        except HubError as error:
            self._error(error, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub.record(
                RequestRecord(
                    self.command,
                    self.path,
                    self._status,
                    self.headers.get("Range"),
                    self.wfile.count - before,
                    token is not None,
                )
            )

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def _route(self, head: bool, token: str | None) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = unquote(url.path)
        access = self.hub.access(token)
        if path == "/api/models":
            limit = int(query.get("limit", ["50"])[0])
            return self._json(self.hub.search(query.get("search", [""])[0], limit), head)
        if match := _TREE.fullmatch(path):
            repo = self.hub.repo(match.group(1), token)
            self.hub.check_revision(repo, match.group(2))
            return self._json(self._tree(repo, match.group(3) or ""), head)
        if match := _INFO.fullmatch(path):
            repo = self.hub.repo(match.group(1), token)
            self.hub.check_revision(repo, match.group(2) or "main")
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            return self._json(self.hub.model_json(repo, blobs=blobs), head)
        if match := _RESOLVE.fullmatch(path):
            repo_id, revision, name = match.groups()
            repo = self.hub.repo(repo_id, token)
            self.hub.check_revision(repo, revision)
            self.hub.check_gate(repo, access)
            file = repo.files.get(name)
            if file is None:
                raise HubError(404, "EntryNotFound", f"{name} does not exist on {revision}")
            time.sleep(self.hub.slow_files.get(name, 0))
            return self._file(repo, file, head)
        raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    @staticmethod
    def _tree(repo: FakeRepo, under: str) -> list[dict]:
        prefix = f"{under.rstrip('/')}/" if under else ""
        entries = []
        for name, file in sorted(repo.files.items()):
            if name.startswith(prefix):
                entry = {"type": "file", "oid": file.etag[:40], "size": file.size, "path": name}
                if file.lfs:
                    entry["lfs"] = {"oid": file.etag, "size": file.size, "pointerSize": 135}
                entries.append(entry)
        return entries

    def _file(self, repo: FakeRepo, file: FakeFile, head: bool) -> None:
        headers = {
            "X-Repo-Commit": repo.sha,
            "ETag": f'"{file.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if file.lfs:
            headers |= {"X-Linked-Size": str(file.size), "X-Linked-Etag": f'"{file.etag}"'}
        start, end, status = 0, file.size - 1, 200
        wanted = self.headers.get("Range")
        if wanted and not head and not self.hub.ignore_ranges:
            start, end = self._range(wanted, file.size)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{file.size}"
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(max(0, end - start + 1)))
        self.end_headers()
        if not head:
            for chunk in file.chunks(start, end):
                self.wfile.write(chunk)

    @staticmethod
    def _range(wanted: str, size: int) -> tuple[int, int]:
        match = _RANGE.fullmatch(wanted.strip())
        if not match or not any(match.groups()):
            raise HubError(416, None, f"Bad range {wanted}")
        first, last = match.groups()
        if not first:  # suffix range: the last N bytes
            return max(0, size - int(last)), size - 1
        start, end = int(first), min(int(last) if last else size - 1, size - 1)
        if start >= size or start > end:
            raise HubError(416, None, f"Range {wanted} outside 0-{size - 1}")
        return start, end

    def _json(self, body, head: bool, status: int = 200, extra: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _error(self, error: HubError, head: bool) -> None:
        extra = {"X-Error-Message": error.message}
        if error.code:
            extra["X-Error-Code"] = error.code
        self._json({"error": error.message}, head, error.status, extra)


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """A Hub that never answers: the port listens, but no connection is ever accepted, so a
    client connects (into the backlog) and then waits for a reply that never comes."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


@contextmanager
def closed_endpoint() -> Iterator[str]:
    """An address where nothing listens: connecting fails at once."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    yield f"http://127.0.0.1:{port}"
