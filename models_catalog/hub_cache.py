"""The Hub client's in-process answer cache: least recently used first out, bounded by entries,
by bytes and by age.

Autocomplete asks the Hub for every prefix a member types, and each answer is a key of its
own: without bounds the cache grows with every keystroke of every member for the life of the
process. An answer's size is the length of its pickle, measured once when it is stored: close
enough to what it holds in memory to bound it, and cheap next to the Hub read it saves.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry:
    expires: float  # time.monotonic() after which the answer is asked again
    size: int  # bytes, as measured when stored
    value: object


def answer_size(value: object) -> int | None:
    """Bytes the answer takes, roughly (its pickle); None when it cannot be measured."""
    try:
        return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None


class AnswerCache:
    """Answers by key, each kept `ttl()` seconds, at most `max_entries` of them and
    `max_bytes` in all; the least recently used go first. Thread-safe. The limits are read
    through callables so a test (or a setting) can change them at run time."""

    def __init__(
        self,
        ttl: Callable[[], float],
        max_entries: Callable[[], int],
        max_bytes: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl, self._max_entries, self._max_bytes = ttl, max_entries, max_bytes
        self._clock = clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The cached answer for `key`, else compute()'s (stored when it fits). An error
        raised by compute() is not stored."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires > now:
                self._entries.move_to_end(key)
                return entry.value  # type: ignore[return-value]
            if entry is not None:
                self._drop(key)
        value = compute()
        self._store(key, value, now)
        return value

    def _store(self, key: Hashable, value: object, now: float) -> None:
        size = answer_size(value)
        max_bytes, max_entries = self._max_bytes(), self._max_entries()
        if size is None or size > max_bytes or max_entries <= 0:
            return  # larger than the whole cache: answered, never kept
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = _Entry(now + self._ttl(), size, value)
            self._bytes += size
            self._evict(now, max_entries, max_bytes)

    def _evict(self, now: float, max_entries: int, max_bytes: int) -> None:
        for key in [k for k, e in self._entries.items() if e.expires <= now]:
            self._drop(key)
        while len(self._entries) > max_entries or self._bytes > max_bytes:
            self._drop(next(iter(self._entries)))  # the least recently used

    def _drop(self, key: Hashable) -> None:
        self._bytes -= self._entries.pop(key).size
