"""Which of a model's own files infinity-emb may be given: those that name Python classes.

infinity loads an embedding model with sentence-transformers (3.4.1 pinned), which reads
modules.json and, for each module, imports the class its `type` names and calls its load():
any importable callable (joblib.load unpickles whatever the module folder holds), and for a
model folder (which our runtimes always get) a `type` outside sentence_transformers is
imported from a .py file in the folder itself, whatever --no-trust-remote-code says. A
module's `path` is joined to the folder as given (absolute or with `..`, it leads anywhere).
A Dense module's config names its activation class, imported and called; config.json's
`sbert_ce_default_activation_function` likewise for a reranker (CrossEncoder); and the
encoder's sentence_bert_config.json passes its arguments to transformers' from_pretrained
(`weights_only: false` would unpickle a pytorch_model.bin).

So a model is given to infinity only when each of those names one of a few classes whose
loading reads plain JSON and weights (safetensors, or torch.load with weights_only): the
modules Transformer (the folder's own model), Pooling, Normalize and Dense, and torch's
activations. WordEmbeddings, Asym and the rest import further classes their configs name.
config_sentence_transformers.json names no class (prompts, a similarity name), nor does
Pooling's config (Pooling(**config)).

Pure checks on parsed JSON, given a reader; standard library only: the download launcher
checks the snapshot with it, without Django, right before it becomes infinity.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MISSING = object()  # a reader's answer: the model has no such file
UNREADABLE = object()  # the file is there, but not JSON that can be read within the bounds
MAX_JSON_BYTES = 4 * 2**20  # a config above this is not a config: it is not read

MODULES_FILE = "modules.json"
MAX_MODULES = 16  # real models list 2 to 4
MODULES_DOC = "sentence_transformers.models."
TRANSFORMER = MODULES_DOC + "Transformer"
DENSE = MODULES_DOC + "Dense"
MODULE_TYPES = (TRANSFORMER, MODULES_DOC + "Pooling", MODULES_DOC + "Normalize", DENSE)
MODULE_KEYS = frozenset({"idx", "name", "path", "type", "kwargs"})
# A module's folder: one plain name inside the model's folder (1_Pooling, 2_Dense).
_MODULE_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DENSE_FEATURES = 2**17
# Classes Dense's config and a reranker's config.json may name: torch's own, which take no
# arguments and read nothing.
ACTIVATIONS = tuple(
    f"torch.nn.modules.{name}"
    for name in (
        "activation.Tanh", "activation.Sigmoid", "activation.ReLU", "activation.GELU",
        "activation.SiLU", "linear.Identity",
    )
)  # fmt: skip
CROSS_ENCODER_ACTIVATION = "sbert_ce_default_activation_function"
# The encoder's config, under each name sentence-transformers reads (the first that exists).
ENCODER_CONFIGS = (
    "sentence_bert_config.json", "sentence_roberta_config.json",
    "sentence_distilbert_config.json", "sentence_camembert_config.json",
    "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)  # fmt: skip
ARGS = ("model_args", "tokenizer_args", "config_args")
ENCODER_KEYS = frozenset({"max_seq_length", "do_lower_case", *ARGS})
# What the encoder's config may pass to from_pretrained: plain settings that load nothing more.
SAFE_ARGS = frozenset(
    {"torch_dtype", "dtype", "model_max_length", "do_lower_case", "padding_side",
     "truncation_side", "add_pooling_layer"}
)  # fmt: skip
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.-]{1,32}")
MAX_SHOWN = 80
FIX = (
    "Use a model whose Sentence Transformers files name only these, or, for a folder of your "
    "own, correct that file."
)

Reader = Callable[[str], Any]  # a file's path in the model -> its JSON, MISSING or UNREADABLE


def shown(value: Any) -> str:
    """A value from a model's file as a refusal quotes it: short, on one line."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)[:200]
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def refusal(read: Reader, where: str) -> str | None:
    """Why infinity may not be given the model at `where` (hf://org/name or file://folder),
    from its files as `read` gives them; None when every class they name is accepted."""
    for check in (_modules_refusal, _encoder_refusal, _cross_encoder_refusal):
        said = check(read, where)
        if said is not None:
            return said
    return None


def _unreadable(name: str, where: str) -> str:
    return (
        f"{name} of {where} cannot be read as JSON within {MAX_JSON_BYTES // 2**20} MiB; "
        "infinity would load its modules from it, so it is not started on it. Correct the "
        "file, or use another model."
    )


def _modules_refusal(read: Reader, where: str) -> str | None:
    modules = read(MODULES_FILE)
    if modules is MISSING:
        return None
    if modules is UNREADABLE:
        return _unreadable(MODULES_FILE, where)
    accepted = ", ".join(MODULE_TYPES)
    if not isinstance(modules, list) or not 0 < len(modules) <= MAX_MODULES:
        size = f"a list of {len(modules)}" if isinstance(modules, list) else shown(modules)
        return (
            f"{MODULES_FILE} of {where} is {size}; a list of 1 to {MAX_MODULES} modules is "
            f"accepted, each of type {accepted}. {FIX}"
        )
    for index, module in enumerate(modules):
        at = f"{MODULES_FILE} of {where}, module {index}"
        said = _module_refusal(module, at, accepted) or _module_config_refusal(module, read, at)
        if said is not None:
            return said
    return None


def _module_refusal(module: Any, at: str, accepted: str) -> str | None:
    if not isinstance(module, dict) or not {"name", "path", "type"} <= module.keys():
        return f"{at} is {shown(module)}; a module has a name, a path and a type. {FIX}"
    extra = sorted(str(k) for k in module.keys() - MODULE_KEYS)
    if extra:
        return (
            f"{at} has the key {shown(extra[0])}; a module has {', '.join(sorted(MODULE_KEYS))}"
            f" only. {FIX}"
        )
    kind, path, name = module["type"], module["path"], module["name"]
    if kind not in MODULE_TYPES:
        return (
            f"{at} has type {shown(kind)}; infinity is given only the Sentence Transformers "
            f"modules {accepted}, whose loading reads plain configs and weights (any other "
            f"type is a class it would import and run, from the model's own files too). {FIX}"
        )
    if kind == TRANSFORMER:
        if path != "":
            return (
                f"{at} is a Transformer with path {shown(path)}; only the model's own folder "
                f'(path "") is accepted for it, whose files are checked. {FIX}'
            )
    elif not (isinstance(path, str) and _MODULE_PATH.fullmatch(path) and ".." not in path):
        return (
            f"{at} has path {shown(path)}; a module's path is one folder inside the model's "
            "folder (a plain name such as 1_Pooling: not absolute, no '..', '/' or '\\', at "
            f"most 64 characters). {FIX}"
        )
    if not (isinstance(name, str) and _NAME.fullmatch(name)):
        return f"{at} has name {shown(name)}; letters, digits, '_' and '-' are accepted. {FIX}"
    idx, kwargs = module.get("idx", 0), module.get("kwargs", [])
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < MAX_MODULES:
        return f"{at} has idx {shown(idx)}; a whole number below {MAX_MODULES} is accepted. {FIX}"
    if not (
        isinstance(kwargs, list)
        and len(kwargs) <= 8
        and all(isinstance(k, str) and _NAME.fullmatch(k) for k in kwargs)
    ):
        return f"{at} has kwargs {shown(kwargs)}; up to 8 argument names are accepted. {FIX}"
    return None


def _module_config_refusal(module: dict, read: Reader, at: str) -> str | None:
    """A Dense module's config names its activation class, which is imported and called."""
    if module["type"] != DENSE:
        return None
    name = f"{module['path']}/config.json"
    config = read(name)
    where = f"{at}: {name}"
    if config is MISSING or config is UNREADABLE:
        return f"{where} is missing or cannot be read as JSON; a Dense module needs it. {FIX}"
    activation = config.get("activation_function") if isinstance(config, dict) else None
    if activation not in ACTIVATIONS:
        return (
            f"{where} has activation_function {shown(activation)}; a Dense module's activation "
            f"is one of {', '.join(ACTIVATIONS)} (another is a class infinity would import and "
            f"call). {FIX}"
        )
    for key in ("in_features", "out_features"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{where} has {key} {shown(value)}; a whole number is accepted. {FIX}"
        if not 0 < value <= MAX_DENSE_FEATURES:
            return f"{where} has {key} {value}; 1 to {MAX_DENSE_FEATURES} is accepted. {FIX}"
    return None


def _encoder_refusal(read: Reader, where: str) -> str | None:
    """The encoder's config: its arguments go to transformers' from_pretrained as they are."""
    for name in ENCODER_CONFIGS:
        config = read(name)
        if config is MISSING:
            continue
        if config is UNREADABLE:
            return _unreadable(name, where)
        at = f"{name} of {where}"
        if not isinstance(config, dict):
            return f"{at} is {shown(config)}; an object is accepted. {FIX}"
        extra = sorted(str(k) for k in config.keys() - ENCODER_KEYS)
        if extra:
            return (
                f"{at} has the key {shown(extra[0])}; {', '.join(sorted(ENCODER_KEYS))} are "
                f"accepted (another changes where or how the model is loaded). {FIX}"
            )
        length = config.get("max_seq_length")
        if length is not None and not (
            isinstance(length, int) and not isinstance(length, bool) and 0 < length <= 2**20
        ):
            return f"{at} has max_seq_length {shown(length)}; 1 to {2**20} is accepted. {FIX}"
        for key in ARGS:
            said = _args_refusal(config.get(key, {}), f"{at}, {key}")
            if said is not None:
                return said
    return None


def _args_refusal(args: Any, at: str) -> str | None:
    if not isinstance(args, dict):
        return f"{at} is {shown(args)}; an object is accepted. {FIX}"
    for key, value in args.items():
        if key not in SAFE_ARGS:
            return (
                f"{at} has {shown(key)}; only {', '.join(sorted(SAFE_ARGS))} are accepted "
                f"(others can make transformers load code or pickles). {FIX}"
            )
        plain = isinstance(value, bool | int) or (
            isinstance(value, str) and _PLAIN_TEXT.fullmatch(value)
        )
        if not plain:
            return f"{at}: {key} is {shown(value)}; a plain word or number is accepted. {FIX}"
    return None


def _cross_encoder_refusal(read: Reader, where: str) -> str | None:
    """A reranker's config.json may name the activation CrossEncoder imports and calls."""
    config = read("config.json")
    if not isinstance(config, dict) or config.get(CROSS_ENCODER_ACTIVATION) is None:
        return None  # no config is the loader's own error; no class named
    activation = config[CROSS_ENCODER_ACTIVATION]
    if activation in ACTIVATIONS:
        return None
    return (
        f"config.json of {where} has {CROSS_ENCODER_ACTIVATION} {shown(activation)}; one of "
        f"{', '.join(ACTIVATIONS)} is accepted (another is a class infinity would import and "
        f"call). {FIX}"
    )


# ---- a folder on disk ----


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to `limit` bytes of a regular file, or None: a FIFO, device or socket is never read
    (opened without blocking, then refused), nor a file larger than `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def read_json_file(path: Path) -> Any:
    """A file's JSON, MISSING when nothing is there, UNREADABLE when it cannot be read as
    JSON within MAX_JSON_BYTES (a folder, a FIFO, a bigger file, not JSON)."""
    if not os.path.lexists(path):
        return MISSING
    data = read_regular(path, MAX_JSON_BYTES)
    if data is None:
        return UNREADABLE
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return UNREADABLE


def folder_refusal(folder: Path, where: str) -> str | None:
    """refusal() of a model folder as it is on disk now: what infinity would read."""

    def read(name: str) -> Any:
        return read_json_file(folder / name)

    return refusal(read, where)
