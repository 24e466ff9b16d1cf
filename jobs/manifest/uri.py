"""Model artifact URIs: which schemes are accepted, and whether the bytes are pinned.

Credentials never belong in a manifest (the profile holds them), so anything that looks
like one is refused, and the message never repeats the secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

SCHEMES = ("hf", "s3", "gs", "pvc", "oci", "https", "file")
# file:// names a model folder on the console's machine: a source on the local backend only
# (the counterpart of pvc:// on Kubernetes); which folders it may name is the backend's rule.
LOCAL_ONLY_SCHEMES = ("file",)
# Where a missing spec.source.model.format means vLLM: a Hugging Face repository or folder.
VLLM_DEFAULT_SCHEMES = ("hf", "file")
_FILE_PART = re.compile(r"[A-Za-z0-9._+@=-]{1,255}")
FILE_PATH_MAX = 4096  # Linux's PATH_MAX: no longer path names a file, and it is not looked up

_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HF = re.compile(
    rf"(?P<org>{_HF_PART})/(?P<repo>{_HF_PART})(?::(?P<rev>[A-Za-z0-9._/-]{{1,255}}))?"
)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_GS_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KEY = re.compile(r"[^\s?#]+")
_OCI = re.compile(
    r"(?P<registry>[A-Za-z0-9.-]+(?::[0-9]{1,5})?)/(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[0-9a-f]{64}))?"
)
_AZURE = re.compile(
    r"(?P<account>[a-z0-9]{3,24})\.blob\.core\.windows\.net/"
    r"(?P<container>[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])?)/(?P<path>[^\s?#]+)"
)
# Query keys that carry secrets: SAS signatures, presigned S3/GCS URLs, tokens.
_SECRET_KEYS = re.compile(
    r"(?i)^(sig|signature|token|access_token|api_key|apikey|key|password|secret|sv|se|sp|"
    r"x-amz-.*|x-goog-.*|awsaccesskeyid|googleaccessid|credential)$"
)


@dataclass(frozen=True)
class UriInfo:
    text: str
    scheme: str
    pinned: bool  # the bytes cannot change under the same uri
    hf_repo: str | None = None  # "org/repo" for hf://
    hf_revision: str | None = None
    file_path: str | None = None  # the absolute path of a file:// uri
    bucket: str | None = None  # s3:// and gs://: the bucket, the key (a folder or an object)
    key: str | None = None
    version: str | None = None  # and its versionId (s3://) or generation (gs://), when pinned

    def __str__(self) -> str:
        return self.text


class UriError(Exception):
    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


def redact(text: str) -> str:
    """The uri with anything that may be a secret (userinfo, query) replaced by ***."""
    text = re.sub(r"(://)[^/@]*@", r"\1***@", text)
    return re.sub(r"\?.*$", "?***", text)


def _shown(text: str) -> str:
    text = redact(text)
    return repr(text if len(text) <= 80 else text[:80] + "…")


def parse_uri(text: str) -> UriInfo:
    if text != text.strip() or any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise UriError(f"{_shown(text)} contains spaces or control characters", "Remove them.")
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise UriError(
            f"{_shown(text)} has no scheme",
            "Write it with one, for example hf://BAAI/bge-m3 for a Hugging Face model.",
        )
    if scheme not in SCHEMES:
        lowered = scheme.lower()
        fix = (
            f"Write the scheme in lowercase: {lowered}://…"
            if lowered in SCHEMES
            else "Use one of hf://, s3://, gs://, pvc://, oci://, an Azure Blob https:// URL, "
            "or file:// for a model folder on the local backend's machine."
        )
        raise UriError(f"the scheme {scheme[:20]!r} is not accepted", fix)
    authority = rest.split("/", 1)[0]
    if "@" in authority:
        raise UriError(
            f"{_shown(text)} carries credentials (user or password before '@')",
            "Remove them: the profile's configured credentials are used to read the artifact.",
        )
    path, qmark, query = rest.partition("?")
    if "#" in text:
        raise UriError(f"{_shown(text)} has a fragment ('#…')", "Remove it.")
    version_key = {"s3": "versionId", "gs": "generation"}.get(scheme)
    pinned_by_query = False
    if qmark:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_KEYS.match(k) for k, _ in pairs):
            raise UriError(
                f"{_shown(text)} carries what looks like credentials in its query string",
                "Remove the query: the profile's configured credentials are used to read it.",
            )
        if version_key is None or len(pairs) != 1 or pairs[0][0] != version_key:
            allowed = "?versionId= on s3:// and ?generation= on gs://"
            raise UriError(
                f"{_shown(text)} has a query string; only {allowed} are accepted",
                "Remove the query string.",
            )
        value = pairs[0][1]
        if (
            not value
            or (scheme == "gs" and not value.isdigit())
            or not re.fullmatch(r"[A-Za-z0-9._-]{1,1024}", value)
        ):
            raise UriError(
                f"{_shown(text)} has an empty or malformed {version_key}",
                f"Give the object's {version_key}, or remove the query.",
            )
        pinned_by_query = True
    return _SCHEME_PARSERS[scheme](text, path, pinned_by_query)


def _hf(text: str, path: str, _: bool) -> UriInfo:
    match = _HF.fullmatch(path)
    if match is None:
        if "/" not in path:
            fix = "Give the full repository id, for example hf://openai-community/gpt2."
        else:
            fix = "Write it as hf://<org>/<repo> or hf://<org>/<repo>:<revision>."
        raise UriError(f"{_shown(text)} is not a Hugging Face repository id", fix)
    revision = match["rev"]
    return UriInfo(
        text,
        "hf",
        pinned=bool(revision and _COMMIT.fullmatch(revision)),
        hf_repo=f"{match['org']}/{match['repo']}",
        hf_revision=revision,
    )


def _bucket(text: str, path: str, pinned: bool, scheme: str, pattern: re.Pattern[str]) -> UriInfo:
    bucket, _, key = path.partition("/")
    if not pattern.fullmatch(bucket):
        raise UriError(
            f"{_shown(text)} does not start with a valid bucket name",
            f"Write it as {scheme}://<bucket>/<key>, with a lowercase bucket name.",
        )
    if not key or not _KEY.fullmatch(key):
        raise UriError(
            f"{_shown(text)} names no object or prefix in the bucket",
            f"Write it as {scheme}://{bucket}/<path to the model>.",
        )
    version = parse_qsl(text.partition("?")[2])[0][1] if pinned else None
    return UriInfo(text, scheme, pinned=pinned, bucket=bucket, key=key, version=version)


def _s3(text: str, path: str, pinned: bool) -> UriInfo:
    return _bucket(text, path, pinned, "s3", _S3_BUCKET)


def _gs(text: str, path: str, pinned: bool) -> UriInfo:
    return _bucket(text, path, pinned, "gs", _GS_BUCKET)


def _pvc(text: str, path: str, _: bool) -> UriInfo:
    claim, _, inner = path.partition("/")
    if not _CLAIM.fullmatch(claim) or not inner or not _KEY.fullmatch(inner):
        raise UriError(
            f"{_shown(text)} is not pvc://<claim>/<path>",
            "Name the PersistentVolumeClaim and the model's path inside it.",
        )
    # A volume's contents can change, but only by someone with access to it; treat it as
    # pinned rather than nag on every pvc:// uri.
    return UriInfo(text, "pvc", pinned=True)


def _oci(text: str, path: str, _: bool) -> UriInfo:
    match = _OCI.fullmatch(path)
    if match is None:
        raise UriError(
            f"{_shown(text)} is not an OCI image reference",
            "Write it as oci://<registry>/<repo>:<tag> or oci://<registry>/<repo>@sha256:<digest>.",
        )
    return UriInfo(text, "oci", pinned=bool(match["digest"]))


def _https(text: str, path: str, _: bool) -> UriInfo:
    if _AZURE.fullmatch(path) is None:
        raise UriError(
            f"{_shown(text)} is not an Azure Blob URL; https:// is accepted only for Azure Blob "
            "storage",
            "Write it as https://<account>.blob.core.windows.net/<container>/<path>, or use "
            "hf://, s3://, gs://, pvc:// or oci://.",
        )
    return UriInfo(text, "https", pinned=False)


def _file(text: str, path: str, _: bool) -> UriInfo:
    """file:///<absolute path>: plain path parts only (no '..', '.', empty parts or odd
    characters), so the path a check reads is the path the server is given."""
    parts = path.split("/")
    shape = (
        "Write it as file:///<absolute path of the model folder>, for example "
        "file:///srv/models/SmolLM2-135M-Instruct."
    )
    if not path.startswith("/") or path == "/":
        raise UriError(f"{_shown(text)} is not an absolute path", shape)
    if len(path) > FILE_PATH_MAX:
        raise UriError(
            f"{_shown(text)} has a path of {len(path)} characters; accepts up to "
            f"{FILE_PATH_MAX} characters (the longest path this machine resolves)",
            "Give the folder's plain path.",
        )
    inner = parts[1:-1] if path.endswith("/") else parts[1:]
    if any(part in ("", ".", "..") for part in inner):
        raise UriError(
            f"{_shown(text)} has an empty, '.' or '..' part", "Give the folder's plain path."
        )
    bad = next((part for part in inner if not _FILE_PART.fullmatch(part)), None)
    if bad is not None:
        raise UriError(
            f"{_shown(text)} has the path part {bad[:40]!r}; accepts letters, digits and . _ + "
            "@ = -",
            "Rename the folder, or give its plain path.",
        )
    return UriInfo(text, "file", pinned=True, file_path="/" + "/".join(inner))


_SCHEME_PARSERS = {
    "hf": _hf,
    "s3": _s3,
    "gs": _gs,
    "pvc": _pvc,
    "oci": _oci,
    "https": _https,
    "file": _file,
}
