"""django-tables2 tables for the objects jobs/ owns: one table per model."""

import django_tables2 as tables
from django.utils import timezone
from django.utils.html import format_html

from jobs.machine_catalog import describe_catalog
from jobs.models import Application, Cluster, Profile


def applications_for_table(membership):
    """The member's applications; one query for the page whatever the count: the profile
    comes along in the same join."""
    return (
        Application.objects.for_member(membership)
        .select_related("profile")
        .defer("profile__machine_catalog", "profile__defaults")
    )


def phase_badge(record):
    """An application's phase on the dashboard, with the id its live socket swaps it by."""
    return format_html(
        '<span id="dash-phase-{}" class="phase phase-{}">{}</span>',
        record.name,
        record.phase.lower(),
        record.phase,
    )


def replicas_text(record):
    return format_html(
        '<span id="dash-replicas-{}">{}/{}</span>',
        record.name,
        record.ready_replicas,
        record.desired_replicas,
    )


def sparkline(record, counts: list[int]):
    """The sparkline cell's content, with the id the dashboard's socket swaps it by."""
    return format_html('<span id="dash-spark-{}">{}</span>', record.name, sparkline_svg(counts))


def sparkline_svg(counts: list[int]):
    """Requests per minute as a small server-rendered line (no script, no inline style)."""
    width, height = 60, 16
    top = max(counts, default=0) or 1
    step = width / max(len(counts) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 1 - (height - 2) * value / top:.1f}"
        for i, value in enumerate(counts)
    )
    total = sum(counts)
    return format_html(
        '<svg class="sparkline" viewBox="0 0 {} {}" width="120" height="24" role="img" '
        'aria-label="{} requests in the last hour"><polyline points="{}" fill="none" '
        'stroke="currentColor" stroke-width="1.2"/></svg>',
        width,
        height,
        total,
        points,
    )


class PhaseColumn(tables.Column):
    def render(self, value, record):
        return phase_badge(record)


class SparklineColumn(tables.Column):
    """The table's `sparklines` (application pk -> counts), set by the view for its page."""

    def render(self, record, table):
        return sparkline(record, getattr(table, "sparklines", {}).get(record.pk, []))


class ApplicationTable(tables.Table):
    name = tables.Column(linkify=("jobs:application-detail", {"name": tables.A("name")}))
    phase = PhaseColumn()
    profile = tables.Column(accessor="profile__name", verbose_name="Profile")
    model = tables.Column(accessor="model_uri", verbose_name="Model", orderable=False)
    replicas = tables.Column(empty_values=(), orderable=False, verbose_name="Replicas")
    requests = SparklineColumn(empty_values=(), orderable=False, verbose_name="Requests, 1 h")
    # A plain column: DateTimeColumn compiles a template for every cell.
    deployed_at = tables.Column(verbose_name="Last deployed", default="never")

    class Meta:
        model = Application
        fields = ("name", "phase", "profile", "model", "replicas", "deployed_at", "requests")
        default_columns = fields
        empty_text = (
            "No models yet. Deploy one with Deploy model, Deploy from YAML, the REST API or "
            "`manage.py app apply`."
        )
        attrs = {"class": "table"}

    def render_replicas(self, record):
        return replicas_text(record)

    def shown(self) -> list:
        """The applications on the table's current page."""
        return [row.record for row in self.page.object_list] if hasattr(self, "page") else []

    def add_sparklines(self) -> None:
        """Requests per minute over the last hour of the page's applications: one query."""
        from jobs.models import UsageMinute
        from jobs.usage.readers import sparkline_counts

        pks = [record.pk for record in self.shown()]
        self.sparklines = sparkline_counts(UsageMinute.objects.all(), pks)

    def render_deployed_at(self, value):
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M")


class ClusterTable(tables.Table):
    name = tables.Column(linkify=("jobs:cluster-edit", {"name": tables.A("name")}))
    backend = tables.Column()
    connection = tables.Column(empty_values=(), orderable=False)
    addons = tables.Column(verbose_name="Add-ons", orderable=False)

    class Meta:
        model = Cluster
        fields = ("name", "backend", "connection", "addons")
        default_columns = fields
        empty_text = "No clusters yet."
        attrs = {"class": "table"}

    def render_connection(self, record):
        return record.connection

    def render_addons(self, value):
        return ", ".join(value) if value else "none"


class ProfileTable(tables.Table):
    name = tables.Column(linkify=("jobs:profile-edit", {"name": tables.A("name")}))
    cluster = tables.Column(accessor="cluster__name", verbose_name="Cluster")
    namespace = tables.Column()
    gpu_kinds = tables.Column(accessor="machine_catalog", verbose_name="GPU kinds", orderable=False)
    vllm_version = tables.Column(verbose_name="vLLM")

    class Meta:
        model = Profile
        fields = ("name", "cluster", "namespace", "gpu_kinds", "vllm_version")
        default_columns = fields
        empty_text = "No profiles yet."
        attrs = {"class": "table"}

    def render_gpu_kinds(self, value):
        return describe_catalog(value)
