"""The judge of one Canary step: the stable and the canary revisions' figures over the step's
window, from the gateway's own metering rows, in; promote, roll back or wait out, with the
reason in words and the figures it went by. Pure: no ORM, no clock.

- Wait while either revision has answered fewer than minRequests requests in the window.
- Roll back when the canary's server error rate (5xx answers and errors inside 200 streams)
  is above the stable one's by more than maxErrorRateIncrease (absolute).
- Roll back when the canary is slower by more than maxLatencyIncrease (relative) and by more
  than LATENCY_SLACK_MS: its p95 time to first token against the stable one's when both
  answered streams, and its p95 latency against the stable one's, each from the two
  revisions' histograms over the same window (rows written before the time to first token had
  a histogram: its mean). The slack keeps a few milliseconds of noise on fast answers (a new
  connection, the histogram's buckets) from rolling a release back.
- Otherwise promote (to the next step, or to 100% after the last).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from jobs.usage.histogram import quantile

PROMOTE, ROLL_BACK, WAIT = "promote", "rollback", "wait"
LATENCY_SLACK_MS = 50.0
LABELS = {
    "ttftP95": "p95 time to first token",
    "ttft": "mean time to first token",
    "latencyP95": "p95 latency",
}


@dataclass(frozen=True)
class RevisionFigures:
    """One revision's figures over a window (sums of its metering rows)."""

    revision: int
    requests: int = 0
    server_errors: int = 0  # 5xx answers and errors inside 200 streams
    latency_buckets: tuple[int, ...] = ()  # over LATENCY_BOUNDS_MS, as the rows keep them
    ttft_ms_sum: float = 0.0
    ttft_count: int = 0
    ttft_buckets: tuple[int, ...] = ()  # streams' time to first token, over the same bounds

    @property
    def error_rate(self) -> float | None:
        return self.server_errors / self.requests if self.requests else None

    @property
    def latency_p95_ms(self) -> float | None:
        return quantile(self.latency_buckets, 0.95) if any(self.latency_buckets) else None

    @property
    def ttft_avg_ms(self) -> float | None:
        return self.ttft_ms_sum / self.ttft_count if self.ttft_count else None

    @property
    def ttft_p95_ms(self) -> float | None:
        return quantile(self.ttft_buckets, 0.95) if any(self.ttft_buckets) else None

    def shown(self) -> dict:
        """For the event, the audit entry and the page."""

        def rounded(value: float | None, places: int) -> float | None:
            return None if value is None else round(value, places)

        return {
            "revision": self.revision,
            "requests": self.requests,
            "serverErrors": self.server_errors,
            "errorRate": rounded(self.error_rate, 4),
            "latencyP95Ms": rounded(self.latency_p95_ms, 1),
            "ttftAvgMs": rounded(self.ttft_avg_ms, 1),
            "ttftP95Ms": rounded(self.ttft_p95_ms, 1),
        }


@dataclass(frozen=True)
class Limits:
    max_error_rate_increase: float
    max_latency_increase: float
    min_requests: int


@dataclass(frozen=True)
class Verdict:
    decision: str  # PROMOTE, ROLL_BACK or WAIT
    reason: str
    figures: dict

    def as_dict(self) -> dict:
        return asdict(self)


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def judge(stable: RevisionFigures, canary: RevisionFigures, limits: Limits) -> Verdict:
    figures = {
        "stable": stable.shown(),
        "canary": canary.shown(),
        "limits": {
            "maxErrorRateIncrease": limits.max_error_rate_increase,
            "maxLatencyIncrease": limits.max_latency_increase,
            "minRequests": limits.min_requests,
        },
    }
    short = [f for f in (stable, canary) if f.requests < limits.min_requests]
    if short:
        names = " and ".join(f"revision {f.revision} has answered {f.requests}" for f in short)
        return Verdict(
            WAIT,
            f"{names} of the {limits.min_requests} requests each revision needs before the "
            "step is judged; it waits for more.",
            figures,
        )
    increase = (canary.error_rate or 0.0) - (stable.error_rate or 0.0)
    figures["errorRateIncrease"] = round(increase, 4)
    if increase > limits.max_error_rate_increase:
        return Verdict(
            ROLL_BACK,
            f"revision {canary.revision} failed {_percent(canary.error_rate or 0)} of its "
            f"requests with server errors ({canary.server_errors} of {canary.requests}), "
            f"revision {stable.revision} {_percent(stable.error_rate or 0)} "
            f"({stable.server_errors} of {stable.requests}): {_percent(increase)} more, above "
            f"maxErrorRateIncrease {_percent(limits.max_error_rate_increase)}.",
            figures,
        )
    for what, ours, theirs in _latencies(stable, canary):
        ratio = ours / theirs - 1 if theirs > 0 else 0.0
        figures[f"{what}Increase"] = round(ratio, 4)
        if ratio > limits.max_latency_increase and ours - theirs > LATENCY_SLACK_MS:
            label = LABELS[what]
            return Verdict(
                ROLL_BACK,
                f"revision {canary.revision}'s {label} is {ours:.0f} ms, revision "
                f"{stable.revision}'s {theirs:.0f} ms: {_percent(ratio)} slower, above "
                f"maxLatencyIncrease {_percent(limits.max_latency_increase)}.",
                figures,
            )
    return Verdict(
        PROMOTE,
        f"revision {canary.revision} answered {canary.requests} requests within the limits "
        f"(server errors {_percent(canary.error_rate or 0)} against "
        f"{_percent(stable.error_rate or 0)}).",
        figures,
    )


def _latencies(
    stable: RevisionFigures, canary: RevisionFigures
) -> Sequence[tuple[str, float, float]]:
    out = []
    if stable.ttft_p95_ms is not None and canary.ttft_p95_ms is not None:
        out.append(("ttftP95", canary.ttft_p95_ms, stable.ttft_p95_ms))
    elif stable.ttft_avg_ms is not None and canary.ttft_avg_ms is not None:
        out.append(("ttft", canary.ttft_avg_ms, stable.ttft_avg_ms))
    if stable.latency_p95_ms is not None and canary.latency_p95_ms is not None:
        out.append(("latencyP95", canary.latency_p95_ms, stable.latency_p95_ms))
    return out


def next_weight(steps: Sequence[int], step: int) -> int:
    """The canary's share after a promotion of step `step`: the next step's, or 100."""
    return steps[step + 1] if step + 1 < len(steps) else 100
