"""Rendered objects as text: multi-document YAML (what `kubectl apply -f` reads) or a JSON
v1 List. Keys keep the order they were built in, so the text reads like a hand-written
manifest and equal objects give byte-identical text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

# libyaml's emitter is several times faster; both write the same text for plain data.
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """One YAML document per object, each starting with '---'."""
    return yaml.dump_all(
        [_plain(obj) for obj in objects],
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100_000,  # never fold a long argument or query across lines
    )


def to_json(objects: Iterable[Mapping[str, Any]]) -> str:
    """A `kind: List` of the objects, as kubectl prints several at once."""
    listing = {"apiVersion": "v1", "kind": "List", "items": [_plain(obj) for obj in objects]}
    return json.dumps(listing, indent=2, ensure_ascii=False) + "\n"


def _plain(value: Any) -> Any:
    # Mapping proxies and tuples from callers become plain dicts and lists the dumper knows.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
