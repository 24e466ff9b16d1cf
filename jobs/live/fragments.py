"""What the overview shows live, as context for its templates and as the HTML fragments its
socket sends (the same templates: the page includes them, the socket sends them alone and
htmx's WebSocket extension swaps each by its id, out of band).

Each fragment is rendered from the database (and the serving figures' cache), never from the
message that prompted it: what a page gets is the latest state, whatever came before. Many
pages in one process share one rendering of the same state (`shared`)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from django.template.loader import render_to_string

from jobs import charts, serving_metrics
from jobs.models import Application, UsageMinute
from jobs.phases import elapsed_text, steps_of
from jobs.tables import phase_badge, replicas_text, sparkline
from jobs.usage import live_figures, sparkline_counts

EVENTS_SHOWN = 20

# fragment name -> the templates it renders, in order (one top-level element with an id each)
TEMPLATES = {
    "status": (
        "jobs/_phase_badge.html",
        "jobs/_overview_status.html",
        "jobs/_overview_endpoint.html",
    ),
    "events": ("jobs/_overview_events.html",),
    "traffic": ("jobs/_cards_traffic.html", "jobs/_chart_points.html"),
    "serving": ("jobs/_cards_serving.html",),
}
FRAGMENTS = tuple(TEMPLATES)


def status_context(application: Application, events: list) -> dict:
    """The phase, the steps on the way to Running with how long the current one has taken."""
    since = next((e.created_at for e in events if e.reason == application.phase), None)
    since = since or application.updated_at
    seconds = (datetime.now(UTC) - since).total_seconds()
    return {
        "application": application,
        "steps": steps_of(application.phase),
        "phase_since": since,
        "phase_elapsed": elapsed_text(seconds),
    }


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def shown(figures: dict) -> dict[str, str]:
    """The cards' figures as people read them ("—" where nothing was asked)."""
    rate = figures["success_rate"]
    return {
        "requests_per_minute": f"{figures['requests_per_minute']:g}",
        "success_rate": "—" if rate is None else f"{rate * 100:.1f}%".replace(".0%", "%"),
        "latency_p50": _ms(figures["latency_p50_ms"]),
        "latency_p95": _ms(figures["latency_p95_ms"]),
        "ttft": _ms(figures["ttft_avg_ms"]),
        "tokens_per_second": f"{figures['tokens_per_second']:g}",
    }


def traffic_context(application: Application) -> dict:
    figures = live_figures(UsageMinute.objects.filter(application=application))
    return {"traffic": {**figures, "show": shown(figures)}}


def serving_context(application: Application) -> dict:
    return {"application": application, "serving": serving_metrics.latest(application.pk)}


def overview_context(application: Application) -> dict:
    """Everything the top of the overview shows: two queries (events, the usage window)."""
    events = list(application.events.all()[:EVENTS_SHOWN])
    return {
        **status_context(application, events),
        **traffic_context(application),
        **serving_context(application),
        "events": events,
    }


def context_for(name: str, application: Application) -> dict:
    if name in ("status", "events"):
        events = list(application.events.all()[:EVENTS_SHOWN])
        return {**status_context(application, events), "events": events}
    if name == "traffic":
        # The page's charts grow by the newest points (overview.js); the page itself starts
        # with none, as its charts read the chart data endpoint.
        rows = UsageMinute.objects.filter(application=application)
        points = charts.latest_points(rows, cache_key=charts.cache_key(application))
        return {**traffic_context(application), "chart_points": json.dumps(points)}
    if name == "serving":
        return serving_context(application)
    raise ValueError(f"fragment {name!r}; accepts {', '.join(FRAGMENTS)}")


def render(names: list[str], application: Application) -> str:
    """The fragments named, for one socket message."""
    parts = []
    for name in names:
        context = context_for(name, application)
        parts.extend(render_to_string(template, context) for template in TEMPLATES[name])
    return "".join(parts)


def deleted(name: str) -> str:
    return render_to_string("jobs/_overview_deleted.html", {"name": name})


def dashboard_phase(application) -> str:
    """One application's phase and replicas on the home dashboard (out of band, by id)."""
    return phase_badge(application) + replicas_text(application)


def dashboard_sparklines(applications: list) -> str:
    """The last hour's sparklines of the applications given: one query for them all."""
    counts = sparkline_counts(UsageMinute.objects.all(), [a.pk for a in applications])
    return "".join(sparkline(a, counts[a.pk]) for a in applications)


class SharedRenderings:
    """The last renderings by (fragment, application, version): pages in one process that got
    the same message share one rendering. Bounded; thread-safe (renders run in threads)."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple, str] = OrderedDict()
        self.renders = 0  # how many renderings were made, for the bench

    def get(self, key: tuple, make: Callable[[], str]) -> str:
        with self._lock:
            html = self._done.get(key)
            if html is not None:
                self._done.move_to_end(key)
                return html
        html = make()
        with self._lock:
            self.renders += 1
            self._done[key] = html
            while len(self._done) > self.size:
                self._done.popitem(last=False)
        return html


shared = SharedRenderings()
