"""A CPU runtime replica's first step for an hf:// model or a bucket folder (s3://, gs://,
Azure Blob):
download the snapshot, then become the runtime (exec), offline and without the Hugging Face
token or the storage credentials.

Run by the local backend as `python <this file> <plan.json> -- <runtime argv...>` in the
replica's own process, so the download holds up neither the request that applied the
manifest nor the reconciler; its lines go to the replica's log, and while this file is the
process's program the replica reads as Downloading. The plan (written by the runner in the
application's private state folder) names the repository, the commit, the downloads folder
and the files with their sizes; each is checked again here, where it becomes a path.
Standard library, huggingface_hub and the storage clients (boto3, google-cloud-storage,
azure-storage-blob, in the console's virtualenv this runs in) only: it starts without Django.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

try:
    from . import download_files, model_files
    from . import download_space as space
    from . import runtimes as rt
    from .storage_env import (
        AZURE_ACCOUNT,
        AZURE_ANONYMOUS,
        AZURE_ENDPOINT,
        AZURE_KEY,
        GCS_ANONYMOUS,
        S3_UNSIGNED,
        STORAGE_ENV,
    )
except ImportError:  # run by path: this file's folder is first on sys.path
    import download_files  # type: ignore[no-redef]
    import download_space as space  # type: ignore[no-redef]
    import model_files  # type: ignore[no-redef]
    import runtimes as rt  # type: ignore[no-redef]
    from storage_env import (  # type: ignore[no-redef]
        AZURE_ACCOUNT,
        AZURE_ANONYMOUS,
        AZURE_ENDPOINT,
        AZURE_KEY,
        GCS_ANONYMOUS,
        S3_UNSIGNED,
        STORAGE_ENV,
    )

SAY = "servedeck download: "
NEXT_STEP = "servedeck next step: "  # the replica's next step when it fails (state.py reads it)
PROGRESS_SECONDS = 5.0
# Exit codes (sysexits.h): the log's last lines say why in words.
EXIT_UNREACHABLE, EXIT_DENIED, EXIT_MISSING, EXIT_DISK, EXIT_BAD_PLAN = 75, 77, 66, 73, 65
EXIT_REFUSED = 78  # the snapshot's files name classes the runtime must not be given


def say(line: str) -> None:
    print(SAY + line, flush=True)


def fail(reason: str, next_step: str, code: int) -> int:
    say(f"failed: {reason}")
    print(NEXT_STEP + next_step, flush=True)
    return code


def folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*") if folder.is_dir() else ():
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def inside(path: Path, root: Path) -> bool:
    resolved, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return resolved == top or top in resolved.parents


@dataclass(frozen=True)
class Plan:
    """What the runner planned for this replica's download (checked again here)."""

    repo: str
    commit: str
    downloads: Path
    files: list[tuple[str, int]]
    runtime: str | None  # None in a plan written before it named one
    reserve: int = 0  # bytes the downloads folder keeps free (download_files.reserve_bytes)
    max_bytes: int = 0  # the most one download may take (this machine's memory); 0: no cap
    versions: tuple[tuple[str, str], ...] = ()  # a bucket folder's files, pinned at apply

    @property
    def shown(self) -> str:
        return self.repo if download_files.bucket_scheme(self.repo) else f"hf://{self.repo}"


def read_plan(path: str) -> Plan:
    """The plan at `path`; raises ValueError when any of it is not what it must be."""
    plan = json.loads(Path(path).read_text())
    repo = download_files.checked_repo(plan["repo"])
    downloads = Path(plan["downloads_dir"])
    if not downloads.is_absolute():
        raise ValueError("the downloads folder is not an absolute path")
    download_files.snapshot_folder(downloads, repo, plan["commit"])  # checks the commit
    files = [(str(name), int(size)) for name, size in plan["files"]]
    names = [n for n, _ in files]
    if not files or download_files.files_to_download(names, plan["layout"]) != sorted(names):
        raise ValueError("the plan's files are not the layout's")
    runtime = plan.get("runtime")
    reserve, max_bytes = int(plan.get("reserve", 0)), int(plan.get("max_bytes", 0))
    if reserve < 0 or max_bytes < 0 or any(size < 0 for _, size in files):
        raise ValueError("the plan's sizes are not sizes")
    versions = tuple((str(name), str(version)) for name, version in plan.get("versions", []))
    scheme = download_files.bucket_scheme(repo)
    if scheme is not None:
        pins = [(name, size, dict(versions).get(name, "")) for name, size in files]
        if sorted(n for n, _ in versions) != sorted(names) or any(not v for *_, v in pins):
            raise ValueError("the plan does not pin every file of the bucket folder")
        if scheme == download_files.GS and not all(v.isdigit() for *_, v in pins):
            raise ValueError("the plan's generations are not numbers")
        if download_files.folder_pin(pins) != plan["commit"]:
            raise ValueError("the plan's files are not the snapshot it names")
    return Plan(
        repo, plan["commit"], downloads, files, None if runtime is None else str(runtime),
        reserve, max_bytes, versions,
    )  # fmt: skip


def files_refusal(plan: Plan) -> str | None:
    """Why the complete snapshot may not be given to infinity (model_files: the classes its
    files name), read from disk right before the runtime starts; a plan that names no
    runtime is checked as infinity's."""
    if plan.runtime not in (None, rt.INFINITY.name):
        return None
    folder = download_files.snapshot_folder(plan.downloads, plan.repo, plan.commit)
    return model_files.folder_refusal(folder, plan.shown)


def download(plan: Plan) -> int:
    """0 when the snapshot is complete on disk, else the exit code (the reason is logged)."""
    repo, commit, downloads, files = plan.repo, plan.commit, plan.downloads, plan.files
    folder = download_files.snapshot_folder(downloads, repo, commit)
    total = sum(size for _, size in files)
    missing = [(name, size) for name, size in files if not (folder / name).is_file()]
    needed = sum(size for _, size in missing)
    say(
        f"{plan.shown} at {commit[:12]}: {len(files)} files, {rt.size_text(total)}; "
        f"{len(missing)} to fetch ({rt.size_text(needed)}) into {folder}"
    )
    too_big = download_files.download_size_refusal(total, plan.max_bytes, plan.shown)
    if too_big is not None:
        return fail(too_big, "Deploy a smaller model.", EXIT_DISK)
    if missing:
        # Reserved under the downloads folder's lock: replicas starting together, of any
        # organisation, each count the others' downloads under way.
        refusal = space.reserve(downloads, (repo, commit), needed, plan.reserve, plan.shown)
        if refusal is not None:
            return fail(refusal, "Free disk in the downloads folder, then Restart.", EXIT_DISK)
        try:
            if download_files.bucket_scheme(repo):
                code = fetch_folder(plan, folder, missing)
            else:
                code = fetch(repo, commit, downloads, [name for name, _ in files], needed)
        finally:
            space.release(downloads)
        if code:
            return code
    for name, _ in files:
        if not (folder / name).is_file() or not inside(folder / name, downloads):
            return fail(
                f"{name} of {plan.shown} is not in its snapshot folder after the download",
                "Restart to download it again.",
                EXIT_MISSING,
            )
    say(f"{plan.shown} is complete in {folder}")
    return 0


# How one file's download went wrong, in the words every storage shares.
DENIED, GONE, UNREACHABLE, ANSWERED = "denied", "gone", "unreachable", "answered"


class _TooBig(Exception):
    """The storage sent more bytes than the file was pinned at."""


class _Sink:
    """Where one file is written: never more than its pinned size, counted and hashed."""

    def __init__(self, handle, size: int) -> None:
        self.handle, self.size, self.written = handle, size, 0
        self.md5 = hashlib.md5()  # noqa: S324 - GCS's own checksum of the pinned bytes

    def write(self, chunk) -> int:
        chunk = bytes(chunk)
        self.written += len(chunk)
        if self.written > self.size:
            raise _TooBig
        self.handle.write(chunk)
        self.md5.update(chunk)
        return len(chunk)

    def flush(self) -> None:
        self.handle.flush()


class S3Files:
    """An S3 folder's files at their pinned versions (versionId, or IfMatch on the ETag),
    through boto3."""

    endpoint_setting = "AWS_ENDPOINT_URL_S3"

    def __init__(self, plan: Plan) -> None:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        self.ClientError, self.BotoCoreError = ClientError, BotoCoreError
        self.errors = (ClientError, BotoCoreError)
        self.anonymous = os.environ.get(S3_UNSIGNED) == "1"
        config = Config(
            connect_timeout=10,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            signature_version=UNSIGNED if self.anonymous else None,
        )
        session = boto3.session.Session()
        self.client = session.client(
            "s3", region_name=session.region_name or "us-east-1", config=config
        )
        self.bucket, self.prefix = plan.repo[len(download_files.S3) :].split("/", 1)

    def write(self, name: str, version: str, sink: _Sink) -> bool:
        """Writes the file into `sink`; False when the bytes are not the pinned ones."""
        args = {"Bucket": self.bucket, "Key": self.prefix + name}
        if version.startswith("etag:"):
            args["IfMatch"] = '"' + version[len("etag:") :] + '"'
        else:
            args["VersionId"] = version
        body = self.client.get_object(**args)["Body"]
        try:
            for chunk in body.iter_chunks(1 << 20):
                sink.write(chunk)
        finally:
            body.close()
        return True

    def failure(self, exc: Exception) -> tuple[str, str]:
        """(kind, what the storage said) of an exception in `errors`."""
        if isinstance(exc, self.BotoCoreError):
            return UNREACHABLE, type(exc).__name__
        response = getattr(exc, "response", {}) or {}
        code = str(response.get("Error", {}).get("Code", ""))
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in ("AccessDenied", "403", "Forbidden") or status == 403:
            return DENIED, code
        if code in ("PreconditionFailed", "NoSuchVersion", "NoSuchKey", "404") or status in (
            404,
            412,
        ):
            return GONE, code
        return ANSWERED, str(code or status)


class GCSFiles:
    """A GCS folder's files at their pinned generations, through google-cloud-storage: the
    generation's metadata is read first (a generation gone, or another one in its place where
    the storage ignores the pin, is refused), the bytes downloaded at that generation, and
    their MD5 checked against the pinned generation's."""

    endpoint_setting = "STORAGE_EMULATOR_HOST"

    def __init__(self, plan: Plan) -> None:
        import requests
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.api, self.auth, self.requests = api, auth, requests
        self.errors = (api.GoogleAPICallError, auth.GoogleAuthError, requests.RequestException)
        self.anonymous = os.environ.get(GCS_ANONYMOUS) == "1"
        if self.anonymous:
            client = storage.Client(project="<none>", credentials=AnonymousCredentials())
        else:
            client = storage.Client(project="<none>")  # Application Default Credentials
        bucket, self.prefix = plan.repo[len(download_files.GS) :].split("/", 1)
        self.bucket = client.bucket(bucket)

    def write(self, name: str, version: str, sink: _Sink) -> bool:
        generation = int(version)
        found = self.bucket.get_blob(self.prefix + name, generation=generation, timeout=(10, 60))
        if found is None or found.generation != generation:
            return False
        blob = self.bucket.blob(self.prefix + name, generation=generation)
        blob.download_to_file(sink, raw_download=True, checksum=None, timeout=(10, 60))
        if found.md5_hash:
            return base64.b64encode(sink.md5.digest()).decode() == found.md5_hash
        return True

    def failure(self, exc: Exception) -> tuple[str, str]:
        api = self.api
        if isinstance(exc, api.Unauthorized | api.Forbidden | self.auth.DefaultCredentialsError):
            return DENIED, type(exc).__name__
        if isinstance(exc, api.NotFound | api.PreconditionFailed):
            return GONE, str(exc.code)
        if isinstance(exc, api.GoogleAPICallError):
            return ANSWERED, str(exc.code)
        return UNREACHABLE, type(exc).__name__


class AzureFiles:
    """An Azure Blob folder's files at their pinned versions through azure-storage-blob: the
    blob's version id where the account keeps versions, else its ETag, sent as If-Match on
    every request of the download (a blob replaced since apply answers 412)."""

    endpoint_setting = AZURE_ENDPOINT

    def __init__(self, plan: Plan) -> None:
        from azure.core import MatchConditions
        from azure.core import exceptions as az
        from azure.storage.blob import BlobServiceClient

        self.az, self.match = az, MatchConditions.IfNotModified
        self.errors = (az.AzureError,)
        self.anonymous = os.environ.get(AZURE_ANONYMOUS) == "1"
        bucket, self.prefix = download_files.bucket_parts(plan.repo)
        host, container = bucket.split("/", 1)
        account = host.partition(".")[0]
        template = os.environ.get(AZURE_ENDPOINT) or "https://{account}" + download_files.AZ_HOST
        credential = None
        if not self.anonymous:
            credential = {
                "account_name": os.environ.get(AZURE_ACCOUNT, ""),
                "account_key": os.environ.get(AZURE_KEY, ""),
            }
        service = BlobServiceClient(
            template.replace("{account}", account),
            credential=credential,
            connection_timeout=10,
            read_timeout=60,
            retry_total=3,
        )
        self.container = service.get_container_client(container)

    def write(self, name: str, version: str, sink: _Sink) -> bool:
        blob = self.container.get_blob_client(self.prefix + name)
        if version.startswith("etag:"):
            etag = '"' + version[len("etag:") :] + '"'
            stream = blob.download_blob(etag=etag, match_condition=self.match, max_concurrency=1)
        else:
            stream = blob.download_blob(version_id=version, max_concurrency=1)
        for chunk in stream.chunks():
            sink.write(chunk)
        return True

    def failure(self, exc: Exception) -> tuple[str, str]:
        az = self.az
        status = getattr(exc, "status_code", None) or 0
        if isinstance(exc, az.ClientAuthenticationError) or status in (401, 403):
            return DENIED, str(status or type(exc).__name__)
        if isinstance(exc, az.ResourceModifiedError | az.ResourceNotFoundError) or status in (
            404,
            412,
        ):
            return GONE, str(status)
        if isinstance(exc, az.ServiceRequestError | az.ServiceResponseError):
            return UNREACHABLE, type(exc).__name__
        return ANSWERED, str(status or type(exc).__name__)


BUCKET_FILES = {
    download_files.S3: S3Files,
    download_files.GS: GCSFiles,
    download_files.AZ: AzureFiles,
}


def fetch_folder(plan: Plan, folder: Path, missing: list[tuple[str, int]]) -> int:
    """Each missing file of the bucket folder at the version pinned at apply (the reader of
    its scheme, BUCKET_FILES), written whole under a temporary name and renamed, never more
    than the size it was planned at."""
    try:
        files = BUCKET_FILES[download_files.bucket_scheme(plan.repo) or ""](plan)
    except Exception as exc:  # noqa: BLE001 - a client that cannot be made (no credentials found)
        return fail(
            f"the storage client for {plan.shown} could not be made ({type(exc).__name__})",
            "Give the profile storageCredentials that may read the bucket (and check this "
            "machine's storage settings), then Restart.",
            EXIT_DENIED,
        )
    versions = dict(plan.versions)

    def gone(name: str) -> int:
        return fail(
            f"{name} of {plan.shown} is no longer the version pinned at apply",
            "Deploy again to pin the folder as it is now.",
            EXIT_MISSING,
        )

    for name, size in missing:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.part")
        try:
            with open(part, "wb") as handle:
                sink = _Sink(handle, size)
                same = files.write(name, versions[name], sink)
            if not same:
                part.unlink(missing_ok=True)
                return gone(name)
            if sink.written != size:
                raise _TooBig
            os.replace(part, target)
        except _TooBig:
            part.unlink(missing_ok=True)
            return fail(
                f"{name} of {plan.shown} is not the {size} bytes it was at apply",
                "Deploy again to pin the folder as it is now.",
                EXIT_MISSING,
            )
        except files.errors as exc:
            part.unlink(missing_ok=True)
            kind, said = files.failure(exc)
            if kind == DENIED:
                how = "anonymous reads" if files.anonymous else "the profile's storage credentials"
                return fail(
                    f"{plan.shown} refused {how} for {name}",
                    "Give the profile storageCredentials that may read the bucket, then Restart.",
                    EXIT_DENIED,
                )
            if kind == GONE:
                return gone(name)
            if kind == UNREACHABLE:
                return fail(
                    f"the storage could not be reached for {plan.shown} ({said})",
                    f"Check this machine's network and {files.endpoint_setting}, then Restart.",
                    EXIT_UNREACHABLE,
                )
            return fail(
                f"the storage answered {said} for {name} of {plan.shown}",
                "Restart in a moment; if it goes on, check the bucket.",
                EXIT_UNREACHABLE,
            )
        except OSError as exc:
            part.unlink(missing_ok=True)
            return fail(
                f"the download into {folder} failed ({exc.strerror or exc})",
                "Check the downloads folder (free disk, permissions), then Restart.",
                EXIT_DISK,
            )
        say(f"{name}: {rt.size_text(size)}")
    return 0


def fetch(repo: str, commit: str, downloads: Path, names: list[str], needed: int) -> int:
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # progress lines instead (not passed on)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = os.environ.get("HF_TOKEN") or None
    blobs = downloads / f"models--{repo.replace('/', '--')}" / "blobs"
    before, done = folder_bytes(blobs), threading.Event()

    def progress() -> None:
        while not done.wait(PROGRESS_SECONDS):
            got = max(0, folder_bytes(blobs) - before)
            share = min(100, got * 100 // needed) if needed else 100
            say(f"{rt.size_text(got)} of {rt.size_text(needed)} ({share}%)")

    reporter = threading.Thread(target=progress, daemon=True)
    reporter.start()
    page = f"{endpoint}/{repo}"
    try:
        snapshot_download(
            repo,
            revision=commit,
            cache_dir=str(downloads),
            allow_patterns=names,
            token=token or False,  # False: never a token saved on this machine
            endpoint=endpoint,
            library_name="servedeck",
        )
    except GatedRepoError:
        if token:
            reason = f"the Hugging Face token has no access to the gated model {repo}"
            step = f"Request access at {page} with the token's account, then Restart."
        else:
            reason = f"{repo} is gated, and the profile has no Hugging Face token to read it with"
            step = (
                f"Accept the model's terms at {page}, give the profile an env/ token reference "
                "of that account, then Restart."
            )
        return fail(reason, step, EXIT_DENIED)
    except RevisionNotFoundError:
        return fail(
            f"{repo} has no commit {commit}",
            "Pin the uri to a commit the repository has, then deploy again.",
            EXIT_MISSING,
        )
    except RepositoryNotFoundError:
        return fail(
            f"there is no model {repo} on the Hub at {endpoint}, or it is private and the "
            "profile's token cannot see it",
            "Check the repository id, or give the profile a token that can read it.",
            EXIT_MISSING,
        )
    except LocalEntryNotFoundError as exc:
        return fail(
            f"the Hugging Face Hub at {endpoint} could not be reached ({type(exc).__name__})",
            "Check this machine's network and HF_ENDPOINT, then Restart; or serve a model "
            "folder from disk (file://).",
            EXIT_UNREACHABLE,
        )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        return fail(
            f"the Hub at {endpoint} answered HTTP {status} for {repo}",
            "Restart in a moment; if it goes on, check the repository and the token.",
            EXIT_UNREACHABLE,
        )
    except OSError as exc:
        return fail(
            f"the download into {downloads} failed ({exc.strerror or exc})",
            "Check the downloads folder (free disk, permissions), then Restart.",
            EXIT_DISK,
        )
    finally:
        done.set()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(f"usage: {argv[0]} <plan.json> -- <runtime argv...>", file=sys.stderr)
        return EXIT_BAD_PLAN
    try:
        plan = read_plan(argv[1])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return fail(f"the download plan cannot be used ({exc})", "Deploy again.", EXIT_BAD_PLAN)
    code = download(plan)
    if code:
        return code
    refusal = files_refusal(plan)
    if refusal is not None:
        return fail(refusal, "Deploy another model, or a commit of it without them.", EXIT_REFUSED)
    runtime = argv[3:]
    dropped = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_DISABLE_PROGRESS_BARS", *STORAGE_ENV)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(rt.OFFLINE_ENV)  # the runtime reads the folder and never asks the Hub
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    say(f"starting {os.path.basename(runtime[0])} on the downloaded folder, offline")
    sys.stdout.flush()
    os.execve(runtime[0], runtime, env)  # noqa: S606 - the runner built this argv, no shell
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
