"""Kubernetes' own kinds that the KubeVirt renderer makes (Service, PersistentVolumeClaim,
ConfigMap, NetworkPolicy), checked against the API's definitions as the official `kubernetes`
client's models carry them: each field's name (strict: an unknown one is an error) and type;
and a ConfigMap's keys as the API server checks them.

The models are plain data classes; nothing here talks to a cluster. They are imported on first
use only: the client's model package is large.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any

MODELS = {
    ("v1", "Service"): "V1Service",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
}


# The API server's rule for a ConfigMap's keys (IsConfigMapKey): they become file names.
CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def is_core(obj: Mapping[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in MODELS


def core_problems(obj: Mapping[str, Any]) -> list[str]:
    """Unknown fields and wrong types, as "<field path>: <what is wrong>"."""
    from kubernetes import client
    from pydantic import ValidationError

    model = getattr(client, MODELS[(obj.get("apiVersion"), obj.get("kind"))])
    problems = _unknown(model, obj, "")
    try:
        model.from_dict(dict(obj))
    except ValidationError as error:
        for each in error.errors():
            where = ".".join(str(p) for p in each["loc"])
            problems.append(f"{where}: {each['msg']}")
    except (ValueError, TypeError) as error:
        problems.append(f"(object): {error}")
    if obj.get("kind") == "ConfigMap" and isinstance(obj.get("data"), Mapping):
        problems += [
            f"data.{key}: not a ConfigMap key (letters, digits, '-', '_' and '.' only)"
            for key in obj["data"]
            if not (isinstance(key, str) and CONFIG_MAP_KEY.fullmatch(key) and key not in ".")
        ]
    return problems


def _unknown(model: Any, data: Any, path: str) -> list[str]:
    if not isinstance(data, Mapping) or not hasattr(model, "model_fields"):
        return []
    names = getattr(model, "attribute_map", None) or {}
    fields = {
        (names.get(name) or f.serialization_alias or f.alias or name): f
        for name, f in model.model_fields.items()
    }
    problems = []
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        field = fields.get(key)
        if field is None:
            problems.append(f"{where}: unknown field (not in {model.__name__})")
            continue
        inner, many = _model_of(field.annotation)
        if inner is None:
            continue
        if many and isinstance(value, list):
            for index, item in enumerate(value):
                problems += _unknown(inner, item, f"{where}[{index}]")
        elif not many:
            problems += _unknown(inner, value, where)
    return problems


def _model_of(annotation: Any) -> tuple[Any, bool]:
    """(the model class a field holds, whether it is a list of them), or (None, False)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (list, typing.List):  # noqa: UP006 - the generated models say List
        inner, _ = _model_of(args[0]) if args else (None, False)
        return inner, inner is not None
    if origin is typing.Union and args:
        return _model_of(args[0])
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation, False
    return None, False
