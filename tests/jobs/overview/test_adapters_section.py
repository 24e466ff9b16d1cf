"""The model page's Adapters section: each LoRA adapter's own requests, success rate and tokens
beside the base model's (from the metering rows' adapter column), over 7 days, in one more
query than a page without adapters, however much usage there is."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Application, UsageMinute
from jobs.overview.adapters import adapter_usage
from jobs.usage.readers import totals_per_adapter
from tests.jobs.overview.test_live_overview import OVERVIEW_QUERIES

ADAPTERS = [
    {"name": "support-lora", "uri": "hf://acme/smol-support-lora"},
    {"name": "legal-lora", "uri": "file://loras/legal"},
]


def make_app(org, adapters=ADAPTERS):
    model = {"uri": "hf://acme/chat"}
    if adapters:
        model["adapters"] = adapters
    return Application.objects.create(
        organization=org,
        name="chat",
        profile=org.profiles.get(),
        manifest={"spec": {"source": {"model": model}}},
        phase="Running",
    )


def usage(app, minutes_ago, adapter="", **counters):
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    scope = f"o{app.organization_id}.a{app.pk}.k{minutes_ago}" + (f".m{adapter}" if adapter else "")
    return UsageMinute(
        minute=minute,
        scope=scope,
        organization_id=app.organization_id,
        application_id=app.pk,
        adapter=adapter,
        **counters,
    )


def cells(html: str) -> list[list[str]]:
    table = html.split('aria-label="Usage per adapter, last 7 days"', 1)[1].split("</table>")[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>")[1], re.S)
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
        for row in rows
    ]


def test_the_page_shows_each_adapter_apart_from_its_base(as_viewer, org):
    app = make_app(org)
    UsageMinute.objects.bulk_create(
        [
            usage(app, 0, requests=10, errors_5xx=1, prompt_tokens=50, completion_tokens=70),
            usage(app, 0, "support-lora", requests=4, prompt_tokens=8, completion_tokens=12),
            usage(app, 3 * 24 * 60, "support-lora", requests=4, errors_in_stream=2),
            usage(app, 8 * 24 * 60, "support-lora", requests=1000),  # older than the week
            usage(app, 60, "old-lora", requests=2, completion_tokens=5),  # since removed
        ]
    )
    html = as_viewer.get("/models/chat/").content.decode()
    assert cells(html) == [
        ["chat (base model)", "hf://acme/chat", "10", "90%", "120"],
        ["support-lora", "hf://acme/smol-support-lora", "8", "75%", "20"],
        ["legal-lora", "file://loras/legal", "0", "—", "0"],
        ["old-lora", "no longer in the manifest", "2", "100%", "5"],
    ]


def test_a_model_without_adapters_has_no_section_and_no_query_more(as_viewer, org):
    make_app(org, adapters=None)
    with CaptureQueriesContext(connection) as queries:
        html = as_viewer.get("/models/chat/").content.decode()
    assert 'id="adapters-h"' not in html
    assert len(queries) == OVERVIEW_QUERIES, "\n".join(q["sql"] for q in queries)


@pytest.mark.parametrize("minutes_of_usage", [0, 7 * 24 * 60])
def test_the_section_adds_one_query_however_much_usage(as_viewer, org, minutes_of_usage):
    app = make_app(org)
    UsageMinute.objects.bulk_create(
        [
            usage(app, m, "support-lora" if m % 2 else "", requests=1)
            for m in range(minutes_of_usage)
        ],
        batch_size=1000,
    )
    with CaptureQueriesContext(connection) as queries:
        html = as_viewer.get("/models/chat/").content.decode()
    assert 'id="adapters-h"' in html
    assert len(queries) == OVERVIEW_QUERIES + 1, "\n".join(q["sql"] for q in queries)
    grouped = [q["sql"] for q in queries if "GROUP BY" in q["sql"] and "adapter" in q["sql"]]
    assert len(grouped) == 1, grouped


def test_totals_per_adapter_bounds_its_window(org):
    app = make_app(org)
    rows = UsageMinute.objects.filter(application=app)
    with pytest.raises(ValueError, match="accepts 1 to 10080"):
        totals_per_adapter(rows, 7 * 24 * 60 + 1)
    assert totals_per_adapter(rows, 1)[0] == {}
    app.manifest = {"spec": {"source": {"model": {"uri": "hf://acme/chat"}}}}
    assert adapter_usage(app) == []
