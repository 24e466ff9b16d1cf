"""validate(): what the cluster would refuse in rendered objects, found before it is asked.

Each KServe object is checked against the openAPIV3Schema of its real CRD (strict: unknown
fields are errors, as with kubectl's default field validation) and against the rules KServe's
webhook and controller add; each KubeVirt object against KubeVirt's OpenAPI definitions (strict
as well) and the references its webhook checks; every object's metadata against Kubernetes'
rules. Service, PersistentVolumeClaim, ConfigMap and NetworkPolicy are checked against the
Kubernetes client's models of them (core_schema.py); objects of other APIs (HTTPRoute) get the
metadata check only. CEL rules (x-kubernetes-validations) are not evaluated: the one KServe
has (an immutable sourceModelUri) only concerns updates.
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
from .core_schema import core_problems, is_core
from .kubevirt_schema import is_kubevirt, kubevirt_errors
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
    if is_kubevirt(obj):
        return _kubevirt_problems(obj)
    if is_core(obj):
        return metadata_problems(obj, True) + core_problems(obj)
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


def _kubevirt_problems(obj: Mapping[str, Any]) -> list[str]:
    """Against KubeVirt's OpenAPI definitions, and what its webhook checks between fields: each
    disk and filesystem names a volume, each interface a network."""
    errors = kubevirt_errors(obj)
    if errors is None:
        return [
            f"no {obj.get('kind')} in KubeVirt's OpenAPI definitions; check apiVersion and kind"
        ]
    problems = metadata_problems(obj, True)
    found = sorted(errors, key=lambda e: list(map(str, e.absolute_path)))
    problems.extend(f"{_path(e.absolute_path)}: {_short(e.message)}" for e in found)
    spec = obj.get("spec") or {}
    instance = (
        (spec.get("template") or {}).get("spec")
        if obj.get("kind") != "VirtualMachineInstance"
        else spec
    )
    if isinstance(instance, Mapping):
        problems.extend(_instance_references(instance))
    return problems


def _instance_references(spec: Mapping[str, Any]) -> list[str]:
    devices = (spec.get("domain") or {}).get("devices") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    networks = {n.get("name") for n in spec.get("networks") or [] if isinstance(n, Mapping)}
    problems = []
    for field, known, what in (
        ("disks", volumes, "volume"),
        ("filesystems", volumes, "volume"),
        ("interfaces", networks, "network"),
    ):
        for index, item in enumerate(devices.get(field) or []):
            name = item.get("name") if isinstance(item, Mapping) else None
            if name not in known:
                problems.append(
                    f"domain.devices.{field}[{index}].name: {name!r} names no {what} of the "
                    "instance"
                )
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
