"""Which replica serves a request: prefix affinity by consistent hashing with bounded loads,
falling back to the least loaded. Pure: the replicas, their loads and the request's body in,
a replica out; the state (requests in flight, back-offs, scraped figures) is in replicas.py.

A chat's first messages (through the first user message) are hashed in blocks into an affinity
key, so every turn of a conversation, and every conversation that starts alike, lands on the
replica whose prefix cache holds it, for as long as that replica's load stays within
LOAD_FACTOR times the mean (Mirrokni, Thorup and Zadimoghaddam's bounded loads); past it the
next replica on the ring takes it. The ring depends only on the sorted replica set, so every
gateway process routes a key alike without talking to the others.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BLOCK = 512  # characters hashed per block
MAX_BLOCKS = 16  # of one message, or of a prompt: the rest does not change where it goes
VIRTUAL_NODES = 64  # points per replica on the ring: an even share with a handful of replicas
LOAD_FACTOR = 1.25  # how far above the mean load a replica still takes its own prefixes
# Requests a replica may hold above that: with a handful in flight the factor alone would send
# a conversation elsewhere at its first overlap with another, losing its cached prefix.
SLACK = 1
# What a runtime's own figures add to a replica's load: each request it has waiting counts as
# one in flight, and a full KV cache as KV_WEIGHT more.
KV_WEIGHT = 2.0


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts (images by URL)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                value = part.get("text")
                if value is None and isinstance(part.get("image_url"), dict):
                    value = part["image_url"].get("url")
                if isinstance(value, str):
                    out.append(value)
        return "\n".join(out)
    return ""


def block_hashes(text: str, seed: int = 0) -> list[int]:
    """The chained hashes of `text` in blocks of BLOCK characters (at most MAX_BLOCKS): each
    covers everything before it, as a prefix cache's blocks do."""
    out, chain = [], seed
    for start in range(0, min(len(text), BLOCK * MAX_BLOCKS), BLOCK):
        chain = _digest(chain.to_bytes(8, "big") + text[start : start + BLOCK].encode())
        out.append(chain)
    return out


def _messages_key(messages: Sequence[Any], seed: int = 0) -> int | None:
    """The chain over the first messages, through the first user message."""
    chain, seen = seed, False
    for message in messages:
        if not isinstance(message, dict):
            return None
        role = message.get("role")
        blocks = block_hashes(f"{role}\x00{_text(message.get('content'))}", chain)
        chain = blocks[-1] if blocks else _digest(chain.to_bytes(8, "big") + b"\x01")
        seen = True
        if role == "user":
            break
    return chain if seen else None


def affinity_key(path: str, body: Mapping[str, Any] | None) -> int | None:
    """Where a request's prefix hashes to, or None when it has none worth keeping together
    (embeddings, scores: they are spread by load alone)."""
    if not isinstance(body, Mapping):
        return None
    if path == "/v1/chat/completions":
        messages = body.get("messages")
        return _messages_key(messages) if isinstance(messages, list) else None
    if path == "/v1/completions":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            # The first block only: a prompt that grows turn by turn keeps its start.
            return block_hashes(prompt[:BLOCK])[0]
        return None
    if path == "/v1/responses":
        seed = 0
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            seed = block_hashes(instructions)[-1]
        given = body.get("input")
        if isinstance(given, str) and given:
            return block_hashes(given[:BLOCK], seed)[0]
        if isinstance(given, list):
            return _messages_key(given, seed)
    return None


@dataclass(frozen=True)
class Ring:
    """Consistent-hash points of a replica set: the same set gives the same ring anywhere."""

    points: tuple[int, ...]
    owners: tuple[str, ...]

    @classmethod
    def of(cls, replicas: Sequence[str]) -> Ring:
        placed = sorted(
            (_digest(f"{replica}#{n}".encode()), replica)
            for replica in sorted(set(replicas))
            for n in range(VIRTUAL_NODES)
        )
        return cls(tuple(p for p, _ in placed), tuple(r for _, r in placed))

    def walk(self, key: int) -> list[str]:
        """The replicas in the order the key meets them, clockwise from its point."""
        if not self.points:
            return []
        start = bisect.bisect_left(self.points, key % (1 << 64))
        order: dict[str, None] = {}
        size = len(self.owners)
        for step in range(size):
            order.setdefault(self.owners[(start + step) % size])
            if len(order) * VIRTUAL_NODES >= size:
                break
        return list(order)


def load_of(in_flight: int, waiting: float | None = None, kv_usage: float | None = None) -> float:
    """A replica's load: its requests in flight from this gateway process, plus what the
    runtime says it has waiting and how full its KV cache is, where it says."""
    return in_flight + (waiting or 0.0) + KV_WEIGHT * (kv_usage or 0.0)


def bound(loads: Mapping[str, float], factor: float = LOAD_FACTOR) -> float:
    """The most load a replica may hold and still take a request of its own prefix: the mean
    load with this request counted, times the factor, rounded up, plus SLACK."""
    if not loads:
        return 0.0
    return math.ceil(factor * (sum(loads.values()) + 1) / len(loads)) + SLACK


def choose(
    replicas: Sequence[str],
    loads: Mapping[str, float],
    key: int | None,
    ring: Ring | None = None,
    tiebreak: int = 0,
) -> str | None:
    """The replica for one request among `replicas` (those that may take it now). With a key:
    the first replica clockwise on the ring (of every replica, so a replica taken out moves only
    its own keys) that is among `replicas` and within the bound; else, or without a key, the
    least loaded, ties broken by `tiebreak` (a counter: ties take turns)."""
    if not replicas:
        return None
    current = {r: loads.get(r, 0.0) for r in replicas}
    if key is not None:
        ring = ring or Ring.of(replicas)
        limit = bound(current)
        for replica in ring.walk(key):
            if replica in current and current[replica] + 1 <= limit:
                return replica
    least = min(current.values())
    ties = sorted(r for r, load in current.items() if load == least)
    return ties[tiebreak % len(ties)]
