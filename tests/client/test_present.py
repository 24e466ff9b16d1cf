"""The presenter's pure pieces, as tables of cases: what `status` reads from the health API
(or the usage API without it), times as every table prints them, problems, and the lines
`app logs -f` prints as new."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from servedeck import cli, present


@pytest.mark.parametrize(
    ("health", "want"),
    [
        (  # windows by name, the health API's snake_case figures
            {"verdict": "healthy", "windows": {"5m": {"requests": 10, "success_rate": 0.9}}},
            {"verdict": "healthy", "requests": 10, "successRate": 0.9},
        ),
        (  # camelCase, latency
            {"windows": {"5m": {"successRate": 1.0, "latencyP50Ms": 12, "latencyP95Ms": 30}}},
            {"successRate": 1.0, "latencyP50Ms": 12, "latencyP95Ms": 30},
        ),
        ({"successRate": 0.5}, {"successRate": 0.5}),  # one window, flat
        ({"windows": {"24h": {"successRate": 0.5}}}, {"successRate": None}),  # no 5m: unknown
    ],
)
def test_health_figures(health, want):
    got = present.health_figures(health)
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize(
    ("totals", "rate"),
    [
        ({"requests": 0, "errors5xx": 0}, None),  # no rate of nothing
        ({"requests": 10, "errors5xx": 1, "errorsInStream": 1}, 0.8),
        ({"requests": 4, "errors5xx": 0, "errors4xx": 4}, 1.0),  # the caller's mistakes
    ],
)
def test_usage_figures_count_5xx_and_stream_errors_as_failures(totals, rate):
    assert present.usage_figures({"totals": totals})["successRate"] == rate


def test_status_lines_say_where_the_figures_come_from():
    app = {
        "spec": {"name": "chat"},
        "status": {"phase": "Failed", "reason": "It crashed.", "nextStep": "Read its log.",
                   "readyReplicas": 0, "desiredReplicas": 1, "endpoint": ""},
    }  # fmt: skip
    said = present.status_lines(app, None, "no health API")
    assert said == [
        "application/chat: Failed",
        "  reason:       It crashed.",
        "  next step:    Read its log.",
        "  replicas:     0/1",
        "  success rate: unknown (no health API)",
    ]
    figures = {"successRate": 0.995, "requests": 200, "latencyP50Ms": 12.4, "latencyP95Ms": None}
    shown = present.status_lines(app, figures, "the health API")
    assert "  success rate: 99.5% (last 5 minutes, 200 requests)" in shown
    assert "  latency:      p50 12 ms, p95 -" in shown and shown[-1] == "  (from the health API)"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "never"),
        ("", "never"),
        ("2026-12-01T15:04:59.9Z", "2026-12-01 15:04"),
        ("2026-12-01T16:04:00+01:00", "2026-12-01 15:04"),  # in UTC, as the console prints
        (datetime(2026, 12, 1, 15, 4, tzinfo=UTC), "2026-12-01 15:04"),
        (datetime(2026, 12, 1, 10, 4, tzinfo=timezone(timedelta(hours=-5))), "2026-12-01 15:04"),
    ],
)
def test_when(value, shown):
    assert present.when(value) == shown


def test_problems_and_the_refused_summary():
    problems = [
        {"path": "spec.name", "message": "bad", "level": "refusal", "origin": "schema"},
        {"path": "spec.scaling", "message": "odd", "level": "warning", "origin": "rule"},
    ]
    refusals, warnings = present.split_problems(problems)
    assert [present.problem_line(p) for p in refusals] == ["error: spec.name: bad"]
    assert [present.problem_line(p) for p in warnings] == ["warning: spec.scaling: odd"]
    assert present.refused_summary(1) == "refused: 1 problem"
    assert present.refused_summary(3) == "refused: 3 problems"
    assert present.key_flag("requestsPerMinute") == "--rpm" and present.key_flag("name") == "NAME"


@pytest.mark.parametrize(
    ("before", "now", "new"),
    [
        ([], ["a", "b"], ["a", "b"]),
        (["a", "b"], ["a", "b"], []),
        (["a", "b"], ["a", "b", "c"], ["c"]),
        (["a", "b", "c"], ["b", "c", "d", "e"], ["d", "e"]),  # the window moved on
        (["x"], ["a", "b"], ["a", "b"]),  # rotated away: everything is new
        (["a", "a"], ["a", "a", "a"], ["a"]),  # repeated lines: the longest overlap
    ],
)
def test_logs_follow_prints_only_new_lines(before, now, new):
    assert cli._new_lines(before, now) == new


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("plain text\twith a tab", "plain text\twith a tab"),
        ("\x1b]0;owned\x07title", "\\x1b]0;owned\\x07title"),  # retitles the terminal
        ("\x1b[2J\x1b[Hcleared", "\\x1b[2J\\x1b[Hcleared"),  # clears what was printed
        ("fake\rover", "fake\\x0dover"),  # a carriage return hides the line's start
        ("\x9b31mC1", "\\x9b31mC1"),  # the one-byte CSI
        ("naïve ünïcode ✓", "naïve ünïcode ✓"),
    ],
)
def test_a_log_line_cannot_drive_the_terminal(line, shown, capsys):
    cli.lines([line])  # what `app logs` prints each line with
    cli.err(line)
    said = capsys.readouterr()
    assert said.out == shown + "\n" and said.err == shown + "\n"
