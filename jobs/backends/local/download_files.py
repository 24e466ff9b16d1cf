"""An hf:// model (or an s3://, gs:// or Azure Blob folder) on the CPU runtimes: which of its
files are downloaded, where their snapshot lies in the downloads folder, and whether they fit
its disk.

Decisions on plain values, like runtimes.py beside it; standard library only, so the download
launcher imports it by path too, without Django.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Collection, Iterable
from pathlib import Path

try:
    from .runtimes import CTRANSLATE2, DOWNLOADS_DIR_SETTING, HF, size_text
except ImportError:  # run by path, from the download launcher
    from runtimes import CTRANSLATE2, DOWNLOADS_DIR_SETTING, HF, size_text  # type: ignore[no-redef]

# A repository id as the uri parser accepts it, checked again where it becomes a path.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
COMMIT = re.compile(r"[0-9a-f]{40}")
# A bucket folder as the local backend downloads it (S3, Google Cloud Storage, Azure Blob): the
# bucket as the uri parser accepts it (Azure's: the account's host and the container), and a
# prefix that only a hash of it ever becomes part of a path.
S3 = "s3://"
GS = "gs://"
AZ = "https://"  # Azure Blob, the only https:// the platform reads
AZ_HOST = ".blob.core.windows.net"
BUCKET_SCHEMES = (S3, GS, AZ)
_BUCKET_FOLDER = {
    S3: re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s?#]{0,1024}/"),
    GS: re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]/[^\s?#]{0,1024}/"),
    AZ: re.compile(
        r"https://[a-z0-9]{3,24}\.blob\.core\.windows\.net/"
        r"[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])?/[^\s?#]{0,1024}/"
    ),
}
# The name a bucket folder's snapshots lie under starts with its scheme's.
_FOLDER_TAG = {S3: "s3", GS: "gs", AZ: "az"}
# A file the runtimes read: plain names, at most one folder down, no glob characters (the
# names become snapshot_download's allow patterns, which are fnmatch patterns).
_FILE_NAME = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,127}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# What transformers and infinity read beside the weights: configs and the tokenizer.
HF_CONFIG_FILES = frozenset(
    {
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
        "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
        "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
        "processor_config.json", "modules.json", "sentence_bert_config.json",
        "config_sentence_transformers.json",
    }
)  # fmt: skip
# Sentence Transformers modules (1_Pooling/, 2_Dense/): their configs and weights.
_MODULE_FILE = re.compile(r"\d+_[A-Za-z]+/(?:[A-Za-z0-9._-]+\.(?:json|txt)|model\.safetensors)")
_SAFETENSORS_SHARD_INDEX = "model.safetensors.index.json"
_SAFETENSORS_SHARD = re.compile(r"model-(\d+)-of-(\d+)\.safetensors")
_BIN_WEIGHTS = re.compile(r"pytorch_model(?:-\d+-of-\d+)?\.bin(?:\.index\.json)?")
CTRANSLATE2_FILES = frozenset(
    {"model.bin", "config.json", "vocabulary.txt", "vocabulary.json", "tokenizer.json",
     "preprocessor_config.json"}
)  # fmt: skip


def checkpoint_safetensors(names: Iterable[str]) -> list[str] | None:
    """The safetensors files a checkpoint loads, from its file names alone: model.safetensors
    (transformers reads it before any index), else a complete set of model-XXXXX-of-NNNNN
    shards, else, with no index, every top-level .safetensors file. None when only the
    index can tell; [] when there are none."""
    top = [n for n in names if "/" not in n and n.endswith(".safetensors")]
    if "model.safetensors" in top:
        return ["model.safetensors"]
    shard_sets: dict[int, dict[int, str]] = {}
    for name in top:
        if match := _SAFETENSORS_SHARD.fullmatch(name):
            shard_sets.setdefault(int(match.group(2)), {})[int(match.group(1))] = name
    for total, shards in shard_sets.items():
        if set(shards) in (set(range(1, total + 1)), set(range(0, total + 1))):
            return [shards[i] for i in sorted(shards)]
    if _SAFETENSORS_SHARD_INDEX in names:
        return None
    return sorted(top)


def files_to_download(
    names: Iterable[str], layout: str, index_files: Collection[str] | None = None
) -> list[str]:
    """The files of a repository the CPU runtime of `layout` reads, in order: configs, the
    tokenizer and one copy of the weights (safetensors where there are any, else PyTorch .bin):
    only the checkpoint's own safetensors (checkpoint_safetensors; where only the index can
    tell, the files `index_files`, its weight_map, names), never the ONNX, OpenVINO, GGUF,
    TensorFlow or Flax copies many repositories carry too, nor other .safetensors beside.
    Names that are not plain file names are left out."""
    names = [n for n in names if isinstance(n, str) and _FILE_NAME.fullmatch(n)]
    if layout == CTRANSLATE2:
        return sorted(n for n in names if n in CTRANSLATE2_FILES)
    if layout != HF:
        return []
    top = [n for n in names if "/" not in n]
    safetensors = checkpoint_safetensors(top)
    if safetensors is None:  # the index names the shards
        listed = {n for n in top if n.endswith(".safetensors")}
        wanted = listed if index_files is None else listed & set(index_files)
        safetensors = sorted(wanted)
    if safetensors:
        weights = list(safetensors)
        if safetensors != ["model.safetensors"] and _SAFETENSORS_SHARD_INDEX in top:
            weights.append(_SAFETENSORS_SHARD_INDEX)
    else:
        weights = [n for n in top if _BIN_WEIGHTS.fullmatch(n)]
    configs = [n for n in top if n in HF_CONFIG_FILES]
    modules = [n for n in names if _MODULE_FILE.fullmatch(n)]
    return sorted(set(configs + weights + modules))


def bucket_scheme(repo: object) -> str | None:
    """The scheme (S3, GS or AZ) of a bucket folder the local backend downloads; None for a
    Hub repository id."""
    return next((s for s in BUCKET_SCHEMES if isinstance(repo, str) and repo.startswith(s)), None)


def bucket_parts(repo: str) -> tuple[str, str]:
    """(bucket, prefix) of a bucket folder checked_repo accepts: for Azure Blob the bucket is
    `<account>.blob.core.windows.net/<container>`, as Check model's reader names it."""
    scheme = bucket_scheme(checked_repo(repo)) or ""
    rest = repo[len(scheme) :]
    if scheme == AZ:
        host, container, prefix = rest.split("/", 2)
        return f"{host}/{container}", prefix
    bucket, prefix = rest.split("/", 1)
    return bucket, prefix


# A LoRA adapter as vLLM loads it (peft's save_pretrained): its config and its safetensors
# weights, and the tokenizer files of an adapter that added tokens; nothing else of its repo.
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
        "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
        "chat_template.jinja",
    }
)  # fmt: skip
# The most one adapter may download: a rank-64 adapter of a 70B model is under 2 GiB.
MAX_ADAPTER_BYTES = 4 * 2**30


def adapter_files_to_download(names: Iterable[str]) -> list[str] | None:
    """The files of an adapter's repository vLLM reads, sorted: adapter_config.json,
    adapter_model.safetensors and the tokenizer files present (top level only); None when
    the config or the safetensors weights are missing."""
    top = {n for n in names if isinstance(n, str) and "/" not in n and _FILE_NAME.fullmatch(n)}
    if ADAPTER_CONFIG not in top or ADAPTER_WEIGHTS not in top:
        return None
    return sorted({ADAPTER_CONFIG, ADAPTER_WEIGHTS} | (top & ADAPTER_TOKENIZER_FILES))


def checked_repo(repo: str) -> str:
    """A Hub repository id, or a bucket folder (`s3://<bucket>/<prefix>/`, `gs://...`, an
    Azure Blob `https://<account>.blob.core.windows.net/<container>/<prefix>/`), fit to become
    part of a path; raises ValueError otherwise."""
    scheme = bucket_scheme(repo)
    if scheme is not None:
        if not _BUCKET_FOLDER[scheme].fullmatch(repo):
            raise ValueError(f"{repo[:100]!r} is not a bucket folder ({scheme}<bucket>/<prefix>/)")
        return repo
    if not isinstance(repo, str) or not _REPO_ID.fullmatch(repo) or ".." in repo:
        raise ValueError(f"{str(repo)[:100]!r} is not a Hugging Face repository id (org/name)")
    return repo


def folder_pin(files: Iterable[tuple[str, int, str]]) -> str:
    """The commit of a bucket folder's snapshot: its files' names, sizes and versions (S3's
    versionId, or the ETag where the bucket keeps no versions; a GCS object's generation; an
    Azure blob's version id, or its ETag where the account keeps no versions),
    hashed; the same files at the same versions are the same snapshot."""
    listed = sorted([str(n), int(s), str(v)] for n, s, v in files)
    return hashlib.sha256(json.dumps(listed).encode()).hexdigest()[:40]


def snapshot_folder(downloads_dir: str | os.PathLike[str], repo: str, commit: str) -> Path:
    """Where the snapshot of `repo` at `commit` lies under the downloads folder (the Hugging
    Face cache layout; a bucket folder under `s3--<bucket>--<hash of its prefix>`, `gs--...`
    or `az--<account>--<container>--...`, its commit folder_pin's); raises ValueError for a
    repo id or commit that is not one, or a path that would leave the folder."""
    checked_repo(repo)
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise ValueError(f"{str(commit)[:60]!r} is not a commit (40 hexadecimal characters)")
    root = Path(os.path.abspath(downloads_dir))
    scheme = bucket_scheme(repo)
    if scheme is not None:
        bucket, prefix = bucket_parts(repo)
        digest = hashlib.sha256(prefix.encode()).hexdigest()[:16]
        bucket = bucket.replace(AZ_HOST + "/", "--")  # <account>--<container>
        folder = root / f"{_FOLDER_TAG[scheme]}--{bucket}--{digest}" / "snapshots" / commit
    else:
        org, name = repo.split("/")
        folder = root / f"models--{org}--{name}" / "snapshots" / commit
    if Path(os.path.normpath(folder)).parent.parent.parent != root:
        raise ValueError(f"{repo!r} would lead outside the downloads folder {root}")
    return folder


def disk_refusal(
    needed: int,
    free: int,
    folder: str | os.PathLike[str],
    what: str,
    reserve: int = 0,
    held: int = 0,
) -> str | None:
    """Why `what` (needed bytes) cannot be downloaded into `folder` with `free` bytes free, of
    which `reserve` stays free (reserve_bytes) and `held` is promised to downloads under way;
    None when it fits."""
    if needed + reserve + held <= free:
        return None
    kept = f", of which {size_text(reserve)} is kept free ({RESERVE_SETTING})" if reserve else ""
    if held:
        kept += f"{' and' if reserve else ', of which'} {size_text(held)} is held by downloads "
        kept += "under way"
    steps = "Free disk there, "
    steps += "wait for the other downloads to finish, " if held else ""
    steps += f"lower {RESERVE_SETTING}, " if reserve else ""
    return (
        f"{what} needs {size_text(needed)} of disk in the downloads folder {folder} "
        f"({DOWNLOADS_DIR_SETTING}), which has {size_text(free)} free{kept}. {steps}or set "
        f"{DOWNLOADS_DIR_SETTING} to a folder with more room."
    )


def download_size_refusal(total: int, memory: int, what: str) -> str | None:
    """Why `what` (`total` bytes of files its runtime reads) is not downloaded at all: more
    than this machine's `memory`, which a CPU runtime must hold the weights in anyway; None
    when it is not more."""
    if total <= memory or not memory:
        return None
    return (
        f"{what} would download {size_text(total)} (the configs, tokenizer and weights its CPU "
        f"runtime reads), more than this machine's {size_text(memory)} of memory, which a CPU "
        "runtime holds the weights in. Pick a smaller or quantised model, or use a profile "
        "with GPUs."
    )


# The free disk the downloads folder keeps: what the console, its database and logs, and the
# machine need beyond the models. Unset: the larger of 5 GiB and 10% of the file system.
RESERVE_SETTING = "SERVEDECK_DOWNLOADS_RESERVE"
DEFAULT_RESERVE_BYTES = 5 * 2**30
DEFAULT_RESERVE_PERCENT = 10
_RESERVE = re.compile(r"(\d{1,16})\s*(%|Ki|Mi|Gi|Ti)?")
_UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def reserve_bytes(text: str | None, filesystem_bytes: int) -> int:
    """The free disk the downloads folder keeps on a file system of `filesystem_bytes`, from
    the setting's text: bytes, with Ki, Mi, Gi or Ti, or a percentage of the file system;
    empty or None for the default. Raises ValueError naming the setting for another value."""
    text = (text or "").strip()
    if not text:
        return max(DEFAULT_RESERVE_BYTES, filesystem_bytes * DEFAULT_RESERVE_PERCENT // 100)
    match = _RESERVE.fullmatch(text)
    if match is None or (match[2] == "%" and int(match[1]) > 90):
        raise ValueError(
            f"{RESERVE_SETTING}={text[:40]!r} is not an amount of disk: give bytes, with Ki, Mi, "
            "Gi or Ti (20Gi), or a percentage of the file system up to 90 (15%)."
        )
    if match[2] == "%":
        return filesystem_bytes * int(match[1]) // 100
    return int(match[1]) * _UNITS[match[2]]
