"""The presenter's pieces, as tables of cases: what `status` reads from the health API (its
real answer, from the view), times as every table prints them, problems, and text from the
server or a model made safe for the terminal."""

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from servedeck import present, terminal

from jobs.models import UsageMinute
from jobs.present import described
from jobs.usage.histogram import LATENCY_BUCKET_FIELDS
from tests.gateway.support import make_app
from tests.helpers import bearer


def health_answer(client, viewer, org, phase: str, **counters) -> dict:
    """What GET /applications/chat/health answers (the real view and its schema) for an
    application in `phase` with one minute of usage (`counters`) two minutes ago."""
    app = make_app(org, "chat", "http://127.0.0.1:9", phase=phase)
    if counters:
        minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
        UsageMinute.objects.create(
            minute=minute,
            scope=f"o{org.pk}.a{app.pk}.k",
            organization=org,
            application=app,
            **counters,
        )
    answer = client.get("/api/v1/applications/chat/health", **bearer(viewer))
    assert answer.status_code == 200, answer.content
    return {"application": described(app), "health": answer.json()}


FAST = LATENCY_BUCKET_FIELDS[4]


@pytest.mark.parametrize(
    ("phase", "counters", "shown"),
    [
        (  # idle: healthy, no requests
            "Running",
            {},
            [
                "  health:       healthy",
                "  success rate: no requests (last 5 minutes, 0 requests)",
                "  latency:      p50 -, p95 -",
            ],
        ),
        (  # 2 of 50 failed: more than 1%
            "Running",
            {"requests": 50, "errors_5xx": 2, FAST: 50},
            ["  health:       degraded", "  success rate: 96.0% (last 5 minutes, 50 requests)"],
        ),
        (  # the caller's mistakes (4xx) are no failures
            "Running",
            {"requests": 4, "errors_4xx": 4, FAST: 4},
            ["  health:       healthy", "  success rate: 100.0% (last 5 minutes, 4 requests)"],
        ),
        ("Failed", {}, ["  health:       down"]),  # not Running
    ],
)
def test_status_reads_the_health_apis_own_answer(client, viewer, org, phase, counters, shown):
    found = health_answer(client, viewer, org, phase, **counters)
    said = present.status_lines(found["application"], found["health"])
    assert said[0] == f"application/chat: {phase}"
    for line in shown:
        assert line in said, said
    if counters:
        assert re.fullmatch(r"  latency:      p50 \d+ ms, p95 \d+ ms", said[-1]), said


def test_status_lines_put_reason_and_next_step_first(client, viewer, org):
    found = health_answer(client, viewer, org, "Running")
    found["application"]["status"].update(
        phase="Failed", reason="It crashed.", nextStep="Read its log.", desiredReplicas=1
    )
    assert present.status_lines(found["application"], found["health"])[:4] == [
        "application/chat: Failed",
        "  reason:       It crashed.",
        "  next step:    Read its log.",
        "  replicas:     0/1",
    ]


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
    terminal.lines([line])  # what `app logs` prints each line with
    terminal.err(line)
    said = capsys.readouterr()
    assert said.out == shown + "\n" and said.err == shown + "\n"
