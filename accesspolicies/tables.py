"""django-tables2 tables of the Access pages: API keys with their usage, and the audit log."""

import django_tables2 as tables
from django.utils import timezone

from accesspolicies import keys as key_verbs
from accesspolicies.models import APIKey, AuditEntry


def _when(value) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M") if value else "never"


class APIKeyTable(tables.Table):
    name = tables.Column()
    masked = tables.Column(verbose_name="Key", accessor="lookup", orderable=False)
    applications = tables.Column(empty_values=(), orderable=False, verbose_name="May call")
    limits = tables.Column(empty_values=(), orderable=False, verbose_name="Limits")
    last_used_at = tables.Column(verbose_name="Last used", empty_values=())
    requests = tables.Column(empty_values=(), orderable=False, verbose_name="Requests (24 h)")
    tokens = tables.Column(empty_values=(), orderable=False, verbose_name="Tokens (24 h)")
    expires_at = tables.Column(verbose_name="Expires", empty_values=())
    state = tables.Column(empty_values=(), orderable=False)
    actions = tables.TemplateColumn(
        template_name="accesspolicies/_key_actions.html", orderable=False, verbose_name=""
    )

    class Meta:
        model = APIKey
        fields = (
            "name",
            "masked",
            "applications",
            "limits",
            "last_used_at",
            "requests",
            "tokens",
            "expires_at",
            "state",
            "actions",
        )
        default_columns = fields
        empty_text = "No API keys yet. Create one below, or with `manage.py apikey create`."
        attrs = {"class": "table"}

    def __init__(self, *args, usage=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.usage = usage or {}

    def render_masked(self, record):
        return record.masked

    def render_applications(self, record):
        return "every application" if record.all_applications else ", ".join(record.applications)

    def render_limits(self, record):
        parts = [
            f"{value} {unit}"
            for value, unit in (
                (record.requests_per_minute, "req/min"),
                (record.tokens_per_minute, "tok/min"),
                (record.concurrent_requests, "at once"),
            )
            if value
        ]
        return ", ".join(parts) or "none"

    def render_last_used_at(self, value):
        return _when(value)

    def render_expires_at(self, value):
        return _when(value) if value else "never"

    def render_requests(self, record):
        return self.usage.get(record.pk, key_verbs.Usage()).requests

    def render_tokens(self, record):
        return self.usage.get(record.pk, key_verbs.Usage()).tokens

    def render_state(self, record):
        return key_verbs.state(record)


class AuditTable(tables.Table):
    created_at = tables.Column(verbose_name="When")
    actor_name = tables.Column(verbose_name="Who")
    action = tables.Column()
    object_type = tables.Column(verbose_name="Object")
    object_name = tables.Column(verbose_name="Name")
    address = tables.Column(verbose_name="From", default="")
    detail = tables.Column(orderable=False)

    class Meta:
        model = AuditEntry
        fields = (
            "created_at",
            "actor_name",
            "action",
            "object_type",
            "object_name",
            "address",
            "detail",
        )
        default_columns = fields
        empty_text = "Nothing recorded yet."
        order_by = ("-created_at",)
        per_page = 50
        attrs = {"class": "table"}

    def render_created_at(self, value):
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")

    def render_detail(self, value):
        if not value:
            return ""
        text = ", ".join(f"{k}={v}" for k, v in value.items())
        return text if len(text) <= 160 else text[:160] + "…"
