"""validate(): what the cluster would refuse in rendered objects, found before it is asked.

Each KServe object is checked against the openAPIV3Schema of its real CRD (strict: unknown
fields are errors, as with kubectl's default field validation) and against the rules KServe's
webhook and controller add; every object's metadata against Kubernetes' rules. Objects of
other APIs (HTTPRoute) get the metadata check only. CEL rules (x-kubernetes-validations) are
not evaluated: the one KServe has (an immutable sourceModelUri) only concerns updates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .admission import (
    RuntimeIndex,
    cluster_runtimes,
    inference_service_problems,
    metadata_problems,
)
from .schemas import crd_dir, crd_for

KSERVE_GROUP = "serving.kserve.io"
_MAX_MESSAGE = 300


def validate(objects: Iterable[Mapping[str, Any]], crd_path: str | Path | None = None) -> list[str]:
    """Every problem, as "<Kind> <namespace>/<name>: <field path>: <what is wrong>"; empty when
    the cluster would take them all. Raises CrdDirError when the CRD folder is missing."""
    objects = list(objects)
    directory = crd_dir(crd_path)
    runtimes = RuntimeIndex(cluster_runtimes(directory.parent / "runtimes"), objects)
    problems: list[str] = []
    for index, obj in enumerate(objects):
        where = _where(obj, index)
        problems.extend(f"{where}: {p}" for p in _problems(obj, directory, runtimes))
    return problems


def _problems(obj: Any, directory: Path, runtimes: RuntimeIndex) -> list[str]:
    if not isinstance(obj, Mapping):
        return ["not an object (a mapping with apiVersion, kind and metadata)"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind: both required, as text"]
    group, _, version = api_version.rpartition("/")
    crd = crd_for(directory, api_version, kind)
    if crd is None:
        if group == KSERVE_GROUP:
            return [f"no {kind} in KServe's CRDs at {directory}; check apiVersion and kind"]
        return metadata_problems(obj, None)
    validator = crd.validator(version)
    if validator is None:
        return [f"apiVersion: {api_version!r}; {kind} is served as {', '.join(crd.versions)}"]
    problems = metadata_problems(obj, crd.namespaced)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    problems.extend(f"{_path(e.absolute_path)}: {_short(e.message)}" for e in errors)
    if kind == "InferenceService":
        problems.extend(inference_service_problems(obj, runtimes))
    return problems


def _where(obj: Any, index: int) -> str:
    if not isinstance(obj, Mapping):
        return f"object {index}"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name", f"#{index}")
    namespace = meta.get("namespace")
    kind = obj.get("kind", "object")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(object)"


def _short(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"
