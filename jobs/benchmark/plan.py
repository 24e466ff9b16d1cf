"""What a benchmark sends, fixed here and nowhere else: per task, the route, the concurrency
levels, and per level the most requests and the longest time; the prompt's length and the
answer's. A member picks none of it. Pure: plain values in, plain values out.

    plan = plan_for("chat")   # levels 1, 4, 16; at most 160 requests and 75 s of load
"""

from __future__ import annotations

from dataclasses import dataclass

CHAT, EMBEDDING, SPEECH = "chat", "embedding", "speech"
TASKS = (CHAT, EMBEDDING, SPEECH)
CHAT_ROUTE = "/v1/chat/completions"
EMBEDDINGS_ROUTE = "/v1/embeddings"
TRANSCRIPTION_ROUTE = "/v1/audio/transcriptions"

PROMPT_TOKENS = 128  # each chat prompt and embedding input, sized by the model's tokenizer
MAX_OUTPUT_TOKENS = 64  # each chat answer (`max_tokens`)
AUDIO_SECONDS = 3  # each transcription's audio (a generated tone)
# How long after its level's end a request may still take before it is cut off and counted
# as an error (a stream is ended as a client hanging up would end it).
GRACE_SECONDS = 5.0
# Beyond the levels' own time: the prompt's sizing (a few calls to the tokenizer), the
# gateway's start and stop. The credential lives for the plan's whole bound, no longer.
SETUP_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Level:
    concurrency: int  # requests in flight at once
    max_requests: int  # the level ends after this many, or
    max_seconds: float  # after this long, whichever comes first


@dataclass(frozen=True, slots=True)
class Plan:
    task: str
    route: str
    levels: tuple[Level, ...]
    prompt_tokens: int
    max_output_tokens: int

    @property
    def max_requests(self) -> int:
        return sum(level.max_requests for level in self.levels)

    @property
    def max_seconds(self) -> float:
        """The longest a run of this plan takes, setup and every level's grace included:
        the benchmark credential expires then, and a run still marked running past it is
        taken as stopped."""
        load = sum(level.max_seconds + GRACE_SECONDS for level in self.levels)
        return load + SETUP_SECONDS


PLANS = {
    CHAT: Plan(
        CHAT,
        CHAT_ROUTE,
        (Level(1, 8, 20.0), Level(4, 24, 20.0), Level(16, 64, 20.0)),
        PROMPT_TOKENS,
        MAX_OUTPUT_TOKENS,
    ),
    EMBEDDING: Plan(
        EMBEDDING,
        EMBEDDINGS_ROUTE,
        (Level(1, 16, 10.0), Level(4, 48, 10.0), Level(16, 128, 10.0)),
        PROMPT_TOKENS,
        0,
    ),
    SPEECH: Plan(
        SPEECH,
        TRANSCRIPTION_ROUTE,
        (Level(1, 4, 20.0), Level(4, 12, 20.0)),
        0,
        0,
    ),
}


class NoPlan(ValueError):
    """The application's task has no benchmark (a reranker, a predictive model)."""


def plan_for(task: str | None) -> Plan:
    """The plan for what the application serves; NoPlan names the tasks that have one."""
    found = PLANS.get(task or "")
    if found is None:
        shown = task or "a predictive model (no OpenAI API)"
        raise NoPlan(
            f"task: {shown} has no benchmark; benchmarks run for chat (streaming chat "
            "completions), embeddings and speech to text."
        )
    return found
