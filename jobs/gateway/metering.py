"""Metering: one RequestRecord per request the gateway answered, counted in process and flushed
each second into per-minute rows (and to the application's channel-layer group)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestRecord:
    """What the gateway knows of one answered request; ids are None when not resolved
    (an unknown key, an unknown model)."""

    at: float  # time.time() when the answer finished (or the client went away)
    status: int  # the status the client got (499 when the client went away first)
    latency_ms: float  # from the request's arrival to the answer's end
    organization_id: int | None = None
    application_id: int | None = None
    api_key_id: int | None = None
    route: str = ""  # the public route, e.g. "/v1/chat/completions"
    stream: bool = False
    ttft_ms: float | None = None  # streams: arrival to the first chunk sent to the client
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_in_stream: bool = False  # an error arrived inside a 200 stream: counts as failure


class Meter:
    """Collects RequestRecords without blocking; `start()` begins the once-a-second flush,
    `flush()` writes what is pending (also on shutdown)."""

    def __init__(self) -> None:
        self.pending: list[RequestRecord] = []

    def record(self, rec: RequestRecord) -> None:
        self.pending.append(rec)

    def start(self) -> None:
        """Idempotent: start flushing in the background (filled in by the metering change)."""

    def flush(self) -> None:
        """Write pending records (filled in by the metering change)."""
