"""django-tables2 tables for the objects jobs/ owns: one table per model."""

import django_tables2 as tables
from django.utils import timezone
from django.utils.html import format_html

from jobs.catalog import describe_catalog
from jobs.models import Application, Cluster, Profile


def applications_for_table(membership):
    """The member's applications; one query for the page whatever the count: the profile
    comes along in the same join."""
    return (
        Application.objects.for_member(membership)
        .select_related("profile")
        .defer("profile__machine_catalog", "profile__defaults")
    )


class PhaseColumn(tables.Column):
    def render(self, value):
        return format_html('<span class="phase phase-{}">{}</span>', value.lower(), value)


class ApplicationTable(tables.Table):
    name = tables.Column(linkify=("jobs:application-detail", {"name": tables.A("name")}))
    phase = PhaseColumn()
    profile = tables.Column(accessor="profile__name", verbose_name="Profile")
    model = tables.Column(accessor="model_uri", verbose_name="Model", orderable=False)
    replicas = tables.Column(empty_values=(), orderable=False, verbose_name="Replicas")
    # A plain column: DateTimeColumn compiles a template for every cell.
    deployed_at = tables.Column(verbose_name="Last deployed", default="never")

    class Meta:
        model = Application
        fields = ("name", "phase", "profile", "model", "replicas", "deployed_at")
        default_columns = fields
        empty_text = (
            "No models yet. Deploy one with Deploy model, Deploy from YAML, the REST API or "
            "`manage.py app apply`."
        )
        attrs = {"class": "table"}

    def render_replicas(self, record):
        return f"{record.ready_replicas}/{record.desired_replicas}"

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
