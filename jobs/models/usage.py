"""What serving measured: the gateway's per-minute usage, replica time (what cost is worked out
from) and benchmarks of a revision with their levels."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from accesspolicies.models import Organization

from .serving import Application, Revision


class UsageMinute(models.Model):
    """What the gateway answered in one minute for one (organisation, application, API key):
    counters the meter adds to once a second, never a write per request.

    Application and key are None for requests that resolved neither (a bad key, an unknown
    model), so every answered request is in exactly one row. `scope` spells the three ids in
    one non-null column so that the (scope, minute) upsert also matches rows with None ids
    (SQL's unique constraints treat NULLs as distinct). The foreign keys carry no database
    constraint: a flush racing an application's deletion must not fail the whole batch.
    """

    minute = models.DateTimeField(help_text="The minute's start (UTC).")
    scope = models.CharField(max_length=160)
    organization = models.ForeignKey(
        Organization,
        null=True,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="usage_minutes",
    )
    application = models.ForeignKey(
        Application,
        null=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        related_name="usage_minutes",
    )
    api_key = models.ForeignKey(
        "accesspolicies.APIKey",
        null=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        related_name="usage_minutes",
    )
    # The revision that answered, during a Canary rollout (jobs/rollouts); null otherwise.
    revision = models.PositiveIntegerField(null=True, blank=True)
    # The LoRA adapter called (its model id, spec.source.model.adapters[].name); "" for the
    # application's own model. An adapter's requests are metered apart from its base's.
    adapter = models.CharField(max_length=63, blank=True, default="")
    requests = models.PositiveIntegerField(default=0)
    errors_4xx = models.PositiveIntegerField(default=0)
    errors_5xx = models.PositiveIntegerField(default=0)
    # 200 streams that carried an error event: failures the status alone does not show.
    errors_in_stream = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    latency_ms_sum = models.FloatField(default=0)
    streams = models.PositiveIntegerField(default=0)
    ttft_ms_sum = models.FloatField(default=0)
    ttft_count = models.PositiveIntegerField(default=0)
    # The latency histogram over jobs.usage.histogram.LATENCY_BOUNDS_MS (non-cumulative).
    latency_le_1ms = models.PositiveIntegerField(default=0)
    latency_le_2_5ms = models.PositiveIntegerField(default=0)
    latency_le_5ms = models.PositiveIntegerField(default=0)
    latency_le_10ms = models.PositiveIntegerField(default=0)
    latency_le_25ms = models.PositiveIntegerField(default=0)
    latency_le_50ms = models.PositiveIntegerField(default=0)
    latency_le_100ms = models.PositiveIntegerField(default=0)
    latency_le_250ms = models.PositiveIntegerField(default=0)
    latency_le_500ms = models.PositiveIntegerField(default=0)
    latency_le_1000ms = models.PositiveIntegerField(default=0)
    latency_le_2500ms = models.PositiveIntegerField(default=0)
    latency_le_5000ms = models.PositiveIntegerField(default=0)
    latency_le_10000ms = models.PositiveIntegerField(default=0)
    latency_le_30000ms = models.PositiveIntegerField(default=0)
    latency_le_60000ms = models.PositiveIntegerField(default=0)
    latency_over_60000ms = models.PositiveIntegerField(default=0)
    # Streams' time to first token over the same bounds (the Canary judge reads its p95).
    ttft_le_1ms = models.PositiveIntegerField(default=0)
    ttft_le_2_5ms = models.PositiveIntegerField(default=0)
    ttft_le_5ms = models.PositiveIntegerField(default=0)
    ttft_le_10ms = models.PositiveIntegerField(default=0)
    ttft_le_25ms = models.PositiveIntegerField(default=0)
    ttft_le_50ms = models.PositiveIntegerField(default=0)
    ttft_le_100ms = models.PositiveIntegerField(default=0)
    ttft_le_250ms = models.PositiveIntegerField(default=0)
    ttft_le_500ms = models.PositiveIntegerField(default=0)
    ttft_le_1000ms = models.PositiveIntegerField(default=0)
    ttft_le_2500ms = models.PositiveIntegerField(default=0)
    ttft_le_5000ms = models.PositiveIntegerField(default=0)
    ttft_le_10000ms = models.PositiveIntegerField(default=0)
    ttft_le_30000ms = models.PositiveIntegerField(default=0)
    ttft_le_60000ms = models.PositiveIntegerField(default=0)
    ttft_over_60000ms = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "minute"], name="usage_minute_per_scope")
        ]
        indexes = [
            models.Index(fields=["application", "minute"], name="usage_by_application"),
            models.Index(fields=["api_key", "minute"], name="usage_by_api_key"),
        ]
        ordering = ["minute"]

    def __str__(self) -> str:
        return f"{self.scope} at {self.minute:%Y-%m-%d %H:%M}: {self.requests} requests"


class ReplicaDay(models.Model):
    """Replica-seconds one application was served with on one UTC day (ready replicas times
    time): what its cost is worked out from (jobs.usage.cost). Closed spans only; the open one is
    the application's ReplicaClock."""

    application = models.ForeignKey(
        Application, on_delete=models.CASCADE, related_name="replica_days"
    )
    day = models.DateField()
    replica_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["application", "day"], name="replica_day_per_app")
        ]
        ordering = ["-day"]

    def __str__(self) -> str:
        return f"{self.application.name} on {self.day}: {self.replica_seconds:.0f} replica-s"


class ReplicaClock(models.Model):
    """How many replicas an application has had ready since when: the open span of replica
    time, closed into ReplicaDay rows each time the count changes."""

    application = models.OneToOneField(
        Application, on_delete=models.CASCADE, related_name="replica_clock"
    )
    ready = models.PositiveIntegerField(default=0)
    since = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.application.name}: {self.ready} ready since {self.since:%Y-%m-%d %H:%M}"


class Benchmark(models.Model):
    """One benchmark of an application's running revision (jobs/benchmark/): a short bounded
    load through the gateway, its figures per concurrency level in BenchmarkLevel. At most one
    runs per application at a time (the constraint; a run past its deadline is taken as
    stopped). While it runs it holds the gateway's credential for this load: a lookup and the
    SHA-256 of a secret that only the worker running it ever holds, cleared when it ends."""

    class State(models.TextChoices):
        RUNNING = "Running"
        SUCCEEDED = "Succeeded"
        FAILED = "Failed"

    application = models.ForeignKey(
        Application, on_delete=models.CASCADE, related_name="benchmarks"
    )
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="benchmarks")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    task = models.CharField(max_length=16)  # jobs.benchmark.plan.TASKS
    route = models.CharField(max_length=40)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    message = models.TextField(blank=True)
    # How the prompts were sized: "tokenizer" (the model's own), "estimate" (4 bytes a
    # token), "audio" (speech to text); and the first prompt's length in tokens.
    prompt_source = models.CharField(max_length=16, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(help_text="The credential's end; a run is over by then.")
    lookup = models.CharField(max_length=12, blank=True, db_index=True)
    secret_hash = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["application"],
                condition=models.Q(state="Running"),
                name="one_running_benchmark_per_application",
            )
        ]
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"benchmark of {self.application.name} revision {self.revision.number}"


class BenchmarkLevel(models.Model):
    """One concurrency level of a benchmark: what its requests measured (times in ms)."""

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="levels")
    concurrency = models.PositiveSmallIntegerField()
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    seconds = models.FloatField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    output_tokens_per_second = models.FloatField(null=True, blank=True)
    requests_per_second = models.FloatField(default=0)
    ttft_p50_ms = models.FloatField(null=True, blank=True)
    ttft_p95_ms = models.FloatField(null=True, blank=True)
    itl_p50_ms = models.FloatField(null=True, blank=True)
    itl_p95_ms = models.FloatField(null=True, blank=True)
    latency_p50_ms = models.FloatField(null=True, blank=True)
    latency_p95_ms = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "concurrency"], name="benchmark_level_per_concurrency"
            )
        ]
        ordering = ["concurrency"]

    def __str__(self) -> str:
        return f"{self.benchmark} at concurrency {self.concurrency}"
