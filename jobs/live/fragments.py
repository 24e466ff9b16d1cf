"""What the overview shows live, as context for its templates and as the HTML fragments its
socket sends (the same templates: the page includes them, the socket sends them alone and
htmx's WebSocket extension swaps each by its id, out of band).

Each fragment is rendered from the database (and the serving figures' cache), never from the
message that prompted it: what a page gets is the latest state, whatever came before. Pages in
one process that got the same message share one rendering of it (`shared`): never pages that
got different messages, even with the same fields, since the events, the elapsed time and the
figures beside the fields may have moved on. Pages refreshing in the same interval share one
too, unless a page already has newer state than it."""

from __future__ import annotations

import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property

from django.template.loader import render_to_string

from jobs.benchmark.shown import results_context as benchmark_results
from jobs.models import Application, UsageMinute
from jobs.overview import serving_metrics
from jobs.reconciler.sleeping import wake_summary
from jobs.rollouts.view import rollout_view
from jobs.status.phases import Phase, elapsed_text, steps_of
from jobs.tables import phase_badge, replicas_text, sparkline
from jobs.usage import charts
from jobs.usage.readers import live_figures, sparkline_counts

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
    "benchmarks": ("jobs/_benchmark_results.html",),
}
FRAGMENTS = tuple(TEMPLATES)


# How a fragment changes with time alone, between the messages that change what it shows: the
# live socket renders it again on its slow refresh (jobs.live.consumers).
NEVER = ""
EACH_MINUTE = "minute"  # the charts' newest point is a new minute's, zero when idle
EACH_REFRESH = "refresh"  # a window over the last minutes, or a step's time, moves on


@dataclass(frozen=True)
class Rendering:
    html: str
    changes: str = NEVER  # with time alone: NEVER, EACH_MINUTE or EACH_REFRESH


def status_context(application: Application, events: list, now: datetime | None = None) -> dict:
    """The phase, the steps on the way to Running with how long the current one has taken."""
    since = next((e.created_at for e in events if e.reason == application.phase), None)
    since = since or application.updated_at
    seconds = ((now or datetime.now(UTC)) - since).total_seconds()
    return {
        "application": application,
        "steps": steps_of(application.phase),
        # A model that sleeps (minReplicas 0): its wakes, which change with its phase.
        "wakes": wake_summary(application),
        "phase_since": since,
        "phase_elapsed": elapsed_text(seconds),
        "rollout": rollout_view(application),
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


def traffic_context(application: Application, now: datetime | None = None) -> dict:
    figures = live_figures(UsageMinute.objects.filter(application=application), now)
    return {"traffic": {**figures, "show": shown(figures)}}


def serving_context(application: Application) -> dict:
    # Figures of a server no longer Running would be stale: they wait for it to run again.
    running = application.phase == Phase.RUNNING
    figures = serving_metrics.latest(application.pk) if running else None
    return {"application": application, "serving": figures}


def overview_context(application: Application) -> dict:
    """Everything the top of the overview shows: two queries (events, the usage window)."""
    events = list(application.events.all()[:EVENTS_SHOWN])
    return {
        **status_context(application, events),
        **traffic_context(application),
        **serving_context(application),
        "events": events,
    }


class Moment:
    """One application's fragments as of one moment; the events are read once, however many
    of its fragments show them."""

    def __init__(self, application: Application, now: datetime | None = None) -> None:
        self.application = application
        self.now = now or datetime.now(UTC)

    @cached_property
    def events(self) -> list:
        return list(self.application.events.all()[:EVENTS_SHOWN])

    @cached_property
    def status(self) -> dict:
        """The status fragment's context, which the events fragment shares (one read of the
        events and of the rollout)."""
        return {**status_context(self.application, self.events, self.now), "events": self.events}

    def context(self, name: str) -> tuple[dict, str]:
        """The fragment's template context, and how it changes with time alone."""
        application = self.application
        if name in ("status", "events"):
            context = self.status
            # While on the way to Running, the current step says for how long; a Canary
            # rollout's figures move with its traffic.
            rolling = context["rollout"] is not None and context["rollout"]["active"]
            moving = name == "status" and (context["steps"] or rolling)
            return context, EACH_REFRESH if moving else NEVER
        if name == "traffic":
            # The page's charts grow by the newest points (overview.js); the page itself starts
            # with none, as its charts read the chart data endpoint.
            rows = UsageMinute.objects.filter(application=application)
            cache_key = charts.cache_key(application)
            points = charts.latest_points(rows, cache_key=cache_key, now=self.now)
            context = {**traffic_context(application, self.now), "chart_points": json.dumps(points)}
            busy = context["traffic"]["requests"] > 0  # requests in the cards' window
            return context, EACH_REFRESH if busy else EACH_MINUTE
        if name == "serving":
            context = serving_context(application)
            # Figures shown expire (serving_metrics.CACHE_SECONDS) when scrapes stop.
            return context, EACH_REFRESH if context["serving"] else NEVER
        if name == "benchmarks":
            # Told when a run starts or ends (jobs.benchmark.runs): nothing moves meanwhile.
            return {"application": application, **benchmark_results(application)}, NEVER
        raise ValueError(f"fragment {name!r}; accepts {', '.join(FRAGMENTS)}")

    def render(self, name: str) -> Rendering:
        context, changes = self.context(name)
        html = "".join(render_to_string(template, context) for template in TEMPLATES[name])
        return Rendering(html, changes)


def render(names: list[str], application: Application, now: datetime | None = None) -> str:
    """The fragments named, for one socket message."""
    moment = Moment(application, now)
    return "".join(moment.render(name).html for name in names)


def deleted(name: str) -> str:
    return render_to_string("jobs/_overview_deleted.html", {"name": name})


def dashboard_phase(application) -> str:
    """One application's phase and replicas on the home dashboard (out of band, by id)."""
    return phase_badge(application) + replicas_text(application)


def dashboard_new(names: list[str]) -> str:
    """The applications created since the dashboard opened, with a link that shows them."""
    return render_to_string("jobs/_dashboard_new.html", {"names": names})


def dashboard_sparklines(applications: list, now: datetime | None = None) -> str:
    """The last hour's sparklines of the applications given: one query for them all."""
    pks = [a.pk for a in applications]
    counts = sparkline_counts(UsageMinute.objects.all(), pks, now=now)
    return "".join(sparkline(a, counts[a.pk]) for a in applications)


class SharedRenderings:
    """The last renderings by (fragment, application, version): pages in one process that got
    the same message (its message_id: jobs.live.groups), or refresh in the same interval,
    share one rendering. Bounded; thread-safe (renders run in threads).

    A page never goes back in time: `stamp()` is taken after each rendering a page gets, and
    get(..., after=that stamp) gives only a rendering begun after it (else makes one anew, which
    later pages then share). A page that connected, or got a message, after a shared rendering
    was made has newer state than it: it gets its own."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple, tuple[int, Rendering]] = OrderedDict()  # (begun, it)
        self._stamps = itertools.count()
        self.renders = 0  # how many renderings were made, for the bench

    def stamp(self) -> int:
        """Later than the beginning of every rendering begun so far, earlier than any after."""
        with self._lock:
            return next(self._stamps)

    def peek(self, key: tuple, after: int = -1) -> Rendering | None:
        """The kept rendering begun after `after`, or None: never renders (safe on a loop)."""
        with self._lock:
            found = self._done.get(key)
            if found is not None and found[0] > after:
                self._done.move_to_end(key)
                return found[1]
        return None

    def get(self, key: tuple, make: Callable[[], Rendering], after: int = -1) -> Rendering:
        found = self.peek(key, after)
        if found is not None:
            return found
        begun = self.stamp()
        done = make()
        with self._lock:
            self.renders += 1
            kept = self._done.get(key)
            if kept is None or kept[0] < begun:  # a newer one made meanwhile stays
                self._done[key] = (begun, done)
                self._done.move_to_end(key)
            while len(self._done) > self.size:
                self._done.popitem(last=False)
        return done


shared = SharedRenderings()
