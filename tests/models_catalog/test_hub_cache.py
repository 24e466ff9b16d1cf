"""The Hub client's answer cache is bounded by entries, bytes and age, least recently used
first out: autocomplete's one query per keystroke cannot grow it without end."""

from __future__ import annotations

import pytest

from models_catalog import hub
from models_catalog.hub_cache import AnswerCache, answer_size


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cache(clock: Clock, ttl: float = 60.0, entries: int = 3, size: int = 10_000) -> AnswerCache:
    return AnswerCache(lambda: ttl, lambda: entries, lambda: size, clock=clock)


def test_the_least_recently_used_answer_goes_first():
    answers = cache(Clock(), entries=3)
    computed: list[str] = []

    def ask(key: str) -> str:
        return answers.get_or_compute(key, lambda: computed.append(key) or key.upper())

    for key in ("a", "b", "c"):
        ask(key)
    assert ask("a") == "A"  # a hit: "a" is now the most recently used
    ask("d")  # evicts "b", the least recently used
    assert len(answers) == 3
    ask("a"), ask("c"), ask("d")
    assert computed == ["a", "b", "c", "d"]
    ask("b")
    assert computed[-1] == "b"


def test_the_bytes_held_stay_under_the_bound():
    answers = cache(Clock(), entries=1000, size=5_000)
    for number in range(50):
        answers.get_or_compute(number, lambda: "x" * 1_000)
    assert answers.bytes <= 5_000
    assert 0 < len(answers) < 50
    assert answers.bytes == len(answers) * answer_size("x" * 1_000)


def test_an_answer_larger_than_the_cache_is_answered_but_not_kept():
    answers = cache(Clock(), size=100)
    assert answers.get_or_compute("big", lambda: "x" * 1_000) == "x" * 1_000
    assert len(answers) == 0 and answers.bytes == 0


def test_answers_expire_after_their_ttl():
    clock = Clock()
    answers = cache(clock, ttl=60.0)
    computed = []
    for now in (0.0, 59.0, 61.0):
        clock.now = now
        answers.get_or_compute("a", lambda: computed.append(clock.now))
    assert computed == [0.0, 61.0]


def test_expired_answers_are_dropped_when_others_are_stored():
    clock = Clock()
    answers = cache(clock, ttl=60.0, entries=10)
    answers.get_or_compute("old", lambda: 1)
    clock.now = 61.0
    answers.get_or_compute("new", lambda: 2)
    assert len(answers) == 1


def test_an_error_is_not_kept():
    answers = cache(Clock())
    with pytest.raises(ZeroDivisionError):
        answers.get_or_compute("a", lambda: 1 / 0)
    assert len(answers) == 0


def test_autocomplete_queries_do_not_grow_the_hub_cache_past_its_bound(hub_env, monkeypatch):
    monkeypatch.setattr(hub, "CACHE_MAX_ENTRIES", 5)
    typed = "qwen2.5-7b-instruct"
    for end in range(1, len(typed) + 1):
        hub.search(typed[:end], limit=3)
    assert len(hub._cache) == 5
    asked = len(hub_env.requests)
    hub.search(typed, limit=3)  # the latest queries are kept
    assert len(hub_env.requests) == asked
    hub.search(typed[:1], limit=3)  # the earliest were let go
    assert len(hub_env.requests) == asked + 1


def test_the_hub_cache_holds_at_most_its_bytes(hub_env, monkeypatch):
    monkeypatch.setattr(hub, "CACHE_MAX_BYTES", 4_000)
    for query in ("qwen", "llama", "deepseek", "mistral", "whisper", "bge", "gpt"):
        hub.search(query, limit=10)
    assert 0 < hub._cache.bytes <= 4_000
