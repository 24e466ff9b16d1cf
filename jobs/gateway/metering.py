"""Metering: one RequestRecord per request the gateway answered, counted in process and flushed
each second into per-minute rows (and to the application's channel-layer group).

`record()` is on the gateway's hot path: under one short lock it adds to one small counter
list, keyed by (organisation, application, key, minute, route, status class). A flush swaps
that dict for an empty one under the lock, so every record lands in exactly one flush; with no
lock held it then folds the swapped counts into the process's totals for /metrics (by
application, route and status class) and into one entry per (organisation, application, key,
minute) for the upsert. Entries a failed write leaves stay for the next try (bounded by count
and age); the process's exit flushes what is left.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from jobs.gateway.prom import render_metrics
from jobs.live import groups
from jobs.usage import counters as c
from jobs.usage.histogram import LATENCY_BOUNDS_MS

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_SECONDS = 1.0
# Bounds on what a failing database may leave pending: entries (one per organisation,
# application, key and minute) and age. Past either, the oldest minutes are dropped and counted.
MAX_PENDING_ENTRIES = 50_000
MAX_PENDING_AGE_SECONDS = 6 * 3600
# No single request carries more tokens than this; larger figures are a broken upstream's.
MAX_TOKENS_PER_REQUEST = 100_000_000
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


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
    revision: int | None = None  # the revision that answered, during a Canary rollout
    adapter: str = ""  # the LoRA adapter called (its model id); "" for the application's own
    # The console's own benchmark load (jobs/benchmark/): counted apart, in no usage row, so
    # never a key's usage, cost or an application's traffic figures; its figures are its own.
    benchmark: bool = False


_ZERO_ROW = (0,) * c.WIDTH


def _tokens(value) -> int:
    """A token figure as the row stores it: a whole number from 0 to the cap."""
    try:
        return min(max(int(value), 0), MAX_TOKENS_PER_REQUEST)
    except (TypeError, ValueError, OverflowError):
        return 0


class Meter:
    """Collects RequestRecords without blocking; `start()` begins the once-a-second flush,
    `flush()` writes what is pending (also on shutdown, through atexit and SIGTERM).

    `write` and `announce` are the two edges (the database, the channel layer); tests and
    benches may pass their own. `record()` may be called from any thread.
    """

    def __init__(
        self,
        interval: float = FLUSH_INTERVAL_SECONDS,
        *,
        write: Callable | None = None,
        announce: bool = True,
        max_entries: int = MAX_PENDING_ENTRIES,
        max_age_seconds: float = MAX_PENDING_AGE_SECONDS,
    ) -> None:
        self.interval = interval
        self.max_entries = max_entries
        self.max_age_seconds = max_age_seconds
        self._write = write
        self._announce_enabled = announce
        self._lock = threading.Lock()  # guards _pending (held briefly)
        self._totals_lock = threading.Lock()  # guards _totals; taken before _lock
        self._flush_lock = threading.Lock()  # one flush at a time, the exit's included
        # (org, app, key, minute, route, status // 100, revision, adapter) -> counters in
        # COUNTER_FIELDS order (revision: None but during a Canary rollout; adapter: "" but for
        # a LoRA adapter's requests)
        self._pending: dict[tuple, list] = {}
        # (app, route, status // 100) -> counters since the process started, for /metrics
        self._totals: dict[tuple, list] = {}
        # (org, app, key, minute, revision, adapter) -> counters a failed write left, for the next
        # flush
        self._unwritten: dict[tuple, list] = {}
        self._names: dict[int, str] = {}  # application id -> name, for /metrics labels
        # application id -> its latest request (epoch seconds) since the last flush, which
        # puts an idle application with minReplicas 0 to sleep (jobs.reconciler.sleeping)
        self._latest: dict[int, float] = {}
        # application id -> its requests being answered now (begin() to record()): a stream
        # longer than scaleToZeroAfter keeps its application awake
        self._active: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._exit_hooked = False
        self._owner_pid = os.getpid()
        # The gateway may set a callable answering how many requests are being answered now.
        self.in_flight: Callable[[], int] | None = None
        # Figures of the meter itself, for /metrics and the logs.
        self.flushes = 0
        self.failed_flushes = 0
        self.dropped_requests = 0
        self.benchmark_requests = 0  # benchmark requests answered (never in a usage row)

    # -- the hot path ----------------------------------------------------------------------

    def record(self, rec: RequestRecord) -> None:
        """Count one answered request. Cheap and never blocking beyond a short lock."""
        status = rec.status
        latency = rec.latency_ms
        if not latency >= 0:  # negative or NaN: a clock step, not a real duration
            latency = 0.0
        prompt = rec.prompt_tokens
        if not (prompt.__class__ is int and 0 <= prompt <= MAX_TOKENS_PER_REQUEST):
            prompt = _tokens(prompt)
        completion = rec.completion_tokens
        if not (completion.__class__ is int and 0 <= completion <= MAX_TOKENS_PER_REQUEST):
            completion = _tokens(completion)
        bucket = c.FIRST_BUCKET + bisect_left(LATENCY_BOUNDS_MS, latency)
        ttft = rec.ttft_ms
        key = (
            rec.organization_id,
            rec.application_id,
            rec.api_key_id,
            int(rec.at // 60) * 60,
            rec.route,
            status // 100,
            rec.revision,
            rec.adapter,
        )
        with self._lock:
            if rec.application_id is not None:
                self._latest[rec.application_id] = rec.at
                active = self._active.get(rec.application_id, 0)
                if active > 1:
                    self._active[rec.application_id] = active - 1
                else:
                    self._active.pop(rec.application_id, None)
            if rec.benchmark:
                self.benchmark_requests += 1
                return
            row = self._pending.get(key)
            if row is None:
                row = self._pending[key] = list(_ZERO_ROW)
            row[c.REQUESTS] += 1
            if status >= 500:
                row[c.ERRORS_5XX] += 1
            elif status >= 400:
                row[c.ERRORS_4XX] += 1
            elif rec.failed_in_stream:
                row[c.ERRORS_IN_STREAM] += 1
            row[c.PROMPT_TOKENS] += prompt
            row[c.COMPLETION_TOKENS] += completion
            row[c.LATENCY_MS_SUM] += latency
            row[bucket] += 1
            if rec.stream:
                row[c.STREAMS] += 1
            if ttft is not None and ttft >= 0:
                row[c.TTFT_MS_SUM] += ttft
                row[c.TTFT_COUNT] += 1
                row[c.FIRST_TTFT_BUCKET + bisect_left(LATENCY_BOUNDS_MS, ttft)] += 1

    def begin(self, application_id: int) -> None:
        """A request to this application has begun; its record() ends it."""
        with self._lock:
            self._active[application_id] = self._active.get(application_id, 0) + 1

    # -- flushing --------------------------------------------------------------------------

    def start(self) -> None:
        """Idempotent: start flushing every `interval` seconds in a daemon thread, and flush at
        the process's exit. Callable from a running event loop (whose loop then carries the
        channel-layer messages) or from a plain thread."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:  # the in-memory layer's queues belong to the server's loop
            groups.note_server_loop(loop)
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name="servedeck-meter", daemon=True)
            self._thread.start()
            hook = not self._exit_hooked
            self._exit_hooked = True
        if hook:
            atexit.register(self._flush_at_exit)
            _exit_on_sigterm()

    def stop(self) -> None:
        """Stop the background flushing and write what is pending."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self.flush()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                try:
                    self.flush()
                except Exception:  # the thread must outlive any one bad flush
                    logger.exception("metering flush failed")
        finally:
            self._forget_connection()

    def _flush_at_exit(self) -> None:
        if os.getpid() != self._owner_pid:  # a forked child inherited the hook, not the counts
            return
        self._stopping.set()
        if not self.flush():
            lost = sum(counts[c.REQUESTS] for counts in self._unwritten.values())
            logger.error("the process exits with %d requests' usage unwritten", lost)

    def flush(self) -> bool:
        """Write what is pending; True when it was written (or nothing was pending). On failure
        the counts stay pending for the next flush. Safe from any thread, also from one running
        an event loop (the database is then written from a helper thread)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._flush()
        result: list[bool] = []

        def flush_and_close() -> None:
            try:
                result.append(self._flush())
            finally:
                self._forget_connection()  # this thread's connection ends with it

        helper = threading.Thread(target=flush_and_close, daemon=True)
        helper.start()
        helper.join()
        return bool(result and result[0])

    def _flush(self) -> bool:
        with self._flush_lock:
            with self._totals_lock:
                with self._lock:
                    swapped, self._pending = self._pending, {}
                    latest, self._latest = self._latest, {}
                    now = time.time()
                    latest.update((application_id, now) for application_id in self._active)
                _fold(swapped, self._totals, lambda k: (k[1], k[4], k[5]))
            batch, self._unwritten = self._unwritten, {}
            # An adapter's entries carry its name; the application's own keep the 5-tuple.
            _fold(swapped, batch, lambda k: (*k[:4], k[6], k[7]) if k[7] else (*k[:4], k[6]))
            if not batch:
                if latest and self._write is None:  # only answers still in progress
                    self._record_latest(latest)
                return True
            try:
                self._write_batch(batch)
            except Exception as error:
                self.failed_flushes += 1
                self._unwritten = batch
                self._bound_unwritten()
                # Never the batch itself: the message is the database's, bounded.
                logger.warning(
                    "usage flush failed (%s: %.200s); %d entries kept for the next try",
                    type(error).__name__,
                    error,
                    len(batch),
                )
                self._forget_connection()
                return False
            self.flushes += 1
            if latest and self._write is None:
                self._record_latest(latest)
            if self._announce_enabled:
                self._announce(batch)
            elif self._write is None:
                self._learn_names(batch)
            return True

    @staticmethod
    def _record_latest(latest: dict[int, float]) -> None:
        """Each application's latest request, for scale to zero; a failure here loses only
        that (the next flush writes newer ones), never the counts already written."""
        from jobs.reconciler import sleeping

        try:
            sleeping.record_requests(latest)
        except Exception as error:
            logger.warning("latest requests not saved (%s: %.200s)", type(error).__name__, error)

    def _write_batch(self, batch: dict) -> None:
        if self._write is not None:
            self._write(batch)
            return
        from jobs.usage import store as usage_store

        usage_store.write(batch)

    @staticmethod
    def _forget_connection() -> None:
        """Close this thread's connection: a broken one is not reused (the next flush connects
        afresh), and a thread that ends leaves none open."""
        try:
            from django.db import connection

            connection.close()
        except Exception:  # noqa: S110 (closing a broken connection may fail too; nothing to do)
            pass

    def _bound_unwritten(self) -> None:
        """Drop the oldest minutes while too many entries (or too old ones) wait."""
        oldest_kept = int(time.time() - self.max_age_seconds)
        waiting = self._unwritten
        if len(waiting) <= self.max_entries and all(k[3] >= oldest_kept for k in waiting):
            return
        ordered = sorted(waiting, key=lambda k: k[3])
        excess = max(len(ordered) - self.max_entries, 0)
        for index, key in enumerate(ordered):
            if index >= excess and key[3] >= oldest_kept:
                break
            self.dropped_requests += waiting.pop(key)[c.REQUESTS]
        logger.warning(
            "usage waited too long or too much for the database: %d requests dropped so far",
            self.dropped_requests,
        )

    def _learn_names(self, batch: dict) -> None:
        """The names of applications /metrics has not labelled yet (one query, if any)."""
        unknown = {key[1] for key in batch if key[1] is not None and key[1] not in self._names}
        if not unknown:
            return
        try:
            from jobs.models import Application

            self._names.update(Application.objects.filter(pk__in=unknown).values_list("pk", "name"))
        except Exception:
            logger.exception("could not read application names for /metrics")

    # -- live pages ------------------------------------------------------------------------

    def _announce(self, batch: dict) -> None:
        """One message per application in the batch to its group `application.<pk>`; a live
        page missing one update must never lose the counts (they are written already)."""
        try:
            from jobs.usage import store as usage_store

            latest = usage_store.latest_minute_per_application(batch)
        except Exception:
            logger.exception("could not read the minute's usage for live pages")
            return
        for app, figures in latest.items():
            self._names[app] = figures["name"]
        if not latest:
            return
        groups.send(
            [
                (groups.application_group(app), {"type": "usage.update", **figures})
                for app, figures in latest.items()
            ]
        )

    # -- what /metrics reads ---------------------------------------------------------------

    def totals(self) -> list[tuple[str, str, str, list]]:
        """The counts since the process started (what is not flushed yet included), as
        (application name, route, status class, counters in COUNTER_FIELDS order)."""
        with self._totals_lock:
            totals = {key: list(counts) for key, counts in self._totals.items()}
            with self._lock:
                pending = [(key, list(counts)) for key, counts in self._pending.items()]
        _fold(pending, totals, lambda k: (k[1], k[4], k[5]))
        out = []
        for (app, route, klass), counts in totals.items():
            name = "" if app is None else self._names.get(app, f"#{app}")
            out.append((name, route, f"{klass}xx", counts))
        return out

    def render_metrics(self) -> str:
        """This meter's /metrics text (see jobs.gateway.prom), for a gateway holding a meter."""
        return render_metrics(self, self.in_flight).decode()

    def pending_entries(self) -> int:
        """Entries waiting for a flush: recorded since the last one, and left by failed ones."""
        return len(self._pending) + len(self._unwritten)


def _fold(source, into: dict, key_of: Callable[[tuple], tuple]) -> None:
    """Add each (key, counters) of `source` (a dict or pairs) into `into` under key_of(key)."""
    items = source.items() if isinstance(source, dict) else source
    for key, counts in items:
        folded = key_of(key)
        total = into.get(folded)
        if total is None:
            into[folded] = list(counts)
        else:
            c.add_into(total, counts)


def _exit_on_sigterm() -> None:
    """Make SIGTERM run the exit hooks (the final flush) when nobody else handles it: by default
    Python dies of SIGTERM without running atexit. A server that installs its own handler
    (uvicorn, daphne's reactor) keeps it and flushes through its own shutdown."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return
        signal.signal(signal.SIGTERM, _raise_system_exit)
    except (ValueError, OSError):  # not the main interpreter, or no signals here
        return


def _raise_system_exit(signum, frame) -> None:
    raise SystemExit(SIGTERM_EXIT_CODE)


_process_meter: Meter | None = None
_process_meter_lock = threading.Lock()


def process_meter() -> Meter:
    """The one Meter of this process, shared by the gateway (record, start, flush) and
    /metrics (render_metrics)."""
    global _process_meter
    with _process_meter_lock:
        if _process_meter is None:
            _process_meter = Meter()
        return _process_meter
