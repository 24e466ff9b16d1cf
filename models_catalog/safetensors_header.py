"""The one reading of safetensors headers' values, for a folder on disk and a Hub repository
alike: parameters per dtype, tensor bytes and tensors, bounded in values as well as bytes.

A header is JSON a model's author writes. Without bounds on its numbers a few bytes cost the
console dearly: a shape of 400-digit dimensions makes big-number products (quadratic time),
and `[10**400]` overflows the float every page divides parameters into. Any number too long
to be a dimension or an offset is refused while the JSON is parsed, before it becomes an int.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# No real tensor has a dimension above 2**40 (a trillion) nor more than 2**50 elements, and no
# checkpoint that many parameters: GPT-scale models have under 2**41.
MAX_DIMENSION = 2**40
MAX_ELEMENTS = 2**50
MAX_RANK = 16  # dimensions of one tensor (convolutions use 5)
MAX_TENSORS_PER_FILE = 200_000  # DeepSeek-V3 has ~92k tensors across its 163 files
MAX_OFFSET = 2**56  # a byte offset in one file
# Header bytes read for one model, every file together (DeepSeek-V3's add up to ~15 MB).
MAX_TOTAL_HEADER_BYTES = 64 * 2**20
# An integer of more digits is neither a dimension nor an offset (2**64 has 20 digits).
MAX_DIGITS = 20
MAX_DTYPE_CHARS = 16
MAX_NAME_SHOWN = 80
WHAT_TO_DO = (
    "The file is damaged or not a model's weights: replace it with the checkpoint's own "
    "safetensors file, or use another model."
)


class HeaderRefused(ValueError):
    """A header whose values no real checkpoint has; the message names the file and tensor."""


class _LongNumber(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _LongNumber(digits)
    return int(text)


def parse(raw: bytes, file: str) -> Any:
    """The header's JSON; raises HeaderRefused for a number too long to be a dimension or an
    offset (never converted), ValueError when it is not JSON."""
    try:
        return json.loads(raw, parse_int=_bounded_int)
    except _LongNumber as exc:
        raise HeaderRefused(
            f"{file}: its safetensors header holds a number of {exc.digits} digits; shapes "
            f"and offsets have at most {MAX_DIGITS}. {WHAT_TO_DO}"
        ) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


@dataclass
class Tensors:
    """What headers say of a checkpoint; add() each file's header in turn."""

    counts: dict[str, int] = field(default_factory=dict)  # parameters per dtype
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)  # tensor data, from offsets
    tensors: int = 0
    header_bytes: int = 0

    @property
    def parameters(self) -> int:
        return sum(self.counts.values())

    @property
    def tensor_bytes(self) -> int:
        return sum(self.bytes_by_dtype.values())

    def take_header_bytes(self, length: int, file: str) -> None:
        """Counts a header's length before it is read; raises HeaderRefused past the total."""
        self.header_bytes += length
        if self.header_bytes > MAX_TOTAL_HEADER_BYTES:
            raise HeaderRefused(
                f"{file}: the safetensors headers of this model add up to more than "
                f"{MAX_TOTAL_HEADER_BYTES // 2**20} MiB; real checkpoints' take a few MiB. "
                f"{WHAT_TO_DO}"
            )

    def add(self, header: Any, file: str) -> None:
        """Counts one file's header. An entry that is not a tensor (no list of whole numbers
        for a shape) is skipped, as a damaged header counts nothing; values no checkpoint
        has are refused (HeaderRefused, naming the file and the tensor)."""
        if not isinstance(header, Mapping):
            return
        if len(header) > MAX_TENSORS_PER_FILE + 1:  # and __metadata__
            raise HeaderRefused(
                f"{file}: its safetensors header lists {len(header)} tensors; one file holds "
                f"at most {MAX_TENSORS_PER_FILE}. {WHAT_TO_DO}"
            )
        for name, entry in header.items():
            if name == "__metadata__" or not isinstance(entry, Mapping):
                continue
            elements = tensor_elements(entry.get("shape"), file, name)
            if elements is None:
                continue
            dtype = entry.get("dtype")
            dtype = dtype[:MAX_DTYPE_CHARS] if isinstance(dtype, str) else str(dtype)[:20]
            self.counts[dtype] = self.counts.get(dtype, 0) + elements
            self.tensors += 1
            length = _offsets_length(entry.get("data_offsets"), file, name)
            self.bytes_by_dtype[dtype] = self.bytes_by_dtype.get(dtype, 0) + length
            if self.parameters > MAX_ELEMENTS:
                raise HeaderRefused(
                    f"{file}: with tensor {_shown(name)} the checkpoint's tensors hold more "
                    f"than 2**50 parameters; no model has that many. {WHAT_TO_DO}"
                )


def tensor_elements(shape: Any, file: str, name: str) -> int | None:
    """The number of elements of a tensor of `shape`; None when it is no shape (a list of
    whole numbers); raises HeaderRefused for one no real tensor has."""
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        return None
    where = f"{file}: tensor {_shown(name)}"
    if len(shape) > MAX_RANK:
        raise HeaderRefused(
            f"{where} has {len(shape)} dimensions; a tensor has at most {MAX_RANK}. {WHAT_TO_DO}"
        )
    elements = 1
    for dim in shape:  # each checked before it multiplies: the product stays small
        if dim > MAX_DIMENSION:
            raise HeaderRefused(
                f"{where} has a dimension of {dim}; at most 2**40 ({MAX_DIMENSION}) is "
                f"accepted. {WHAT_TO_DO}"
            )
        elements *= dim
        if elements > MAX_ELEMENTS:
            raise HeaderRefused(
                f"{where} has more than 2**50 elements ({MAX_ELEMENTS}); no real tensor has "
                f"that many. {WHAT_TO_DO}"
            )
    return elements


def _offsets_length(offsets: Any, file: str, name: str) -> int:
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        return 0
    start, end = offsets
    if not 0 <= start <= end <= MAX_OFFSET:
        raise HeaderRefused(
            f"{file}: tensor {_shown(name)} has data offsets {start} to {end}; offsets run "
            f"from 0 up to 2**56, the end after the start. {WHAT_TO_DO}"
        )
    return end - start


def summary_parameters(counts: Mapping[str, Any], where: str) -> dict[str, int]:
    """A parameter count per dtype given by someone else (the Hub's summary of the headers),
    held to the same bounds; raises HeaderRefused."""
    found: dict[str, int] = {}
    for dtype, count in counts.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise HeaderRefused(f"{where} gives {str(count)[:40]!r} parameters of a dtype.")
        found[str(dtype)[:MAX_DTYPE_CHARS]] = found.get(str(dtype)[:MAX_DTYPE_CHARS], 0) + count
        if sum(found.values()) > MAX_ELEMENTS:
            raise HeaderRefused(
                f"{where} gives more than 2**50 parameters; no model has that many. {WHAT_TO_DO}"
            )
    return found


def _shown(name: Any) -> str:
    text = str(name)
    return repr(text if len(text) <= MAX_NAME_SHOWN else text[:MAX_NAME_SHOWN] + "…")


def count(headers: Iterable[tuple[str, Any]]) -> Tensors:
    """Every (file, header) counted together."""
    found = Tensors()
    for file, header in headers:
        found.add(header, file)
    return found
