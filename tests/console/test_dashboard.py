"""The Models dashboard: what it lists, for whom, as a page and as an htmx fragment, and that its
cost in SQL queries does not grow with the number of applications."""

import copy
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.deploy import apply
from jobs.models import Application, Phase, UsageMinute
from tests.helpers import SHORTEST

# The session, the user, the membership with its organisation, the paginator's count, the
# member's other organisations (the switcher), one page of applications with profiles, and
# the page's sparklines (requests per minute over the last hour, one query for them all).
DASHBOARD_QUERIES = 7
PER_PAGE = 50  # console.views.home paginates by 50


def fill(membership, count: int) -> list[Application]:
    """`count` applications in the member's organisation: one saved through `apply`, the rest
    bulk-created with copies of its filled-in manifest (fast enough for thousands)."""
    first = apply(SHORTEST, membership).application
    phases = [Phase.RUNNING, Phase.PENDING, Phase.FAILED, Phase.LOADING]
    now = timezone.now()
    rows = []
    for index in range(1, count):
        name = f"model-{index:04d}"
        manifest = copy.deepcopy(first.manifest)
        manifest["spec"]["name"] = name
        manifest["spec"]["source"]["model"]["uri"] = f"hf://acme/model-{index:04d}"
        rows.append(
            Application(
                organization=membership.organization,
                name=name,
                profile=first.profile,
                manifest=manifest,
                phase=phases[index % len(phases)],
                ready_replicas=index % 3,
                desired_replicas=2,
                deployed_at=now - timedelta(minutes=index),
            )
        )
    Application.objects.bulk_create(rows, batch_size=500)
    return [first, *rows]


def add_usage(applications, minutes: int) -> None:
    """Gateway rows for each application over the last `minutes` minutes (up to 60 apps)."""
    start = timezone.now().replace(second=0, microsecond=0)
    rows = [
        UsageMinute(
            minute=start - timedelta(minutes=step),
            scope=f"o{app.organization_id}.a{app.pk}.k-",
            organization_id=app.organization_id,
            application_id=app.pk,
            requests=step + 1,
        )
        for app in applications[:60]
        for step in range(minutes)
    ]
    UsageMinute.objects.bulk_create(rows, batch_size=500)


def test_each_application_has_its_sparkline_of_the_last_hour(as_admin, admin, within_one_minute):
    applications = fill(admin, 3)
    add_usage(applications[:1], minutes=90)  # half an hour more than the line shows
    html = as_admin.get("/").content.decode()
    assert html.count('class="sparkline"') == 3
    assert 'aria-label="1830 requests in the last hour"' in html  # 1 + 2 + ... + 60
    assert html.count('aria-label="0 requests in the last hour"') == 2
    # and the live socket is told which applications the page shows
    assert 'ws-connect="/ws/dashboard/?shown=bge-embed,model-0001,model-0002"' in html


class TableReader(HTMLParser):
    """The header cells and body rows (as text) of the table inside #applications."""

    def __init__(self):
        super().__init__()
        self.inside = 0  # depth inside <div id="applications">
        self.headers: list[str] = []
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self._cell: list[str] | None = None
        self._section = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and (self.inside or attrs.get("id") == "applications"):
            self.inside += 1
        if not self.inside:
            return
        if tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr" and self._section == "tbody":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = []
        elif tag == "a" and self._section == "tbody":
            self.links.append(attrs.get("href", ""))

    def handle_endtag(self, tag):
        if not self.inside:
            return
        if tag == "div":
            self.inside -= 1
        elif tag in ("th", "td") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            if tag == "th":
                self.headers.append(text)
            else:
                self.rows[-1].append(text)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def read_table(response) -> TableReader:
    reader = TableReader()
    reader.feed(response.content.decode())
    return reader


@pytest.mark.parametrize("count", [1, 10, 1000])
def test_the_same_queries_whatever_the_number_of_applications(as_admin, admin, count):
    applications = fill(admin, count)
    add_usage(applications, minutes=60)
    with CaptureQueriesContext(connection) as queries:
        response = as_admin.get("/")
    assert response.status_code == 200
    assert len(queries) == DASHBOARD_QUERIES, "\n".join(q["sql"] for q in queries)
    rows = read_table(response).rows
    assert len(rows) == min(count, PER_PAGE)


def test_lists_each_application_with_its_phase_profile_model_replicas_and_deploy_time(
    as_admin, admin
):
    applications = fill(admin, 10)
    Application.objects.filter(name="bge-embed").update(
        phase=Phase.UPDATING, ready_replicas=1, desired_replicas=3
    )
    table = read_table(as_admin.get("/"))
    assert table.headers == [
        "Name",
        "Phase",
        "Profile",
        "Model",
        "Replicas",
        "Last deployed",
        "Requests, 1 h",
    ]
    by_name = {row[0]: row for row in table.rows}
    assert sorted(by_name) == sorted(app.name for app in applications)
    phase, profile, model, replicas = by_name["bge-embed"][1:5]
    assert (phase, profile, replicas) == ("Updating", "local", "1/3")
    assert model.startswith("hf://BAAI/bge-m3:")  # pinned to a commit when applied
    assert by_name["model-0001"][1:5] == ["Pending", "local", "hf://acme/model-0001", "1/2"]
    assert by_name["model-0004"][1:5] == ["Running", "local", "hf://acme/model-0004", "1/2"]
    assert by_name["model-0002"][1] == "Failed"
    assert all(row[5] not in ("", "never") for row in table.rows)  # all have been deployed
    assert "/models/bge-embed/" in table.links


def test_never_deployed_says_so(as_admin, admin):
    fill(admin, 1)
    Application.objects.update(deployed_at=None)
    (row,) = read_table(as_admin.get("/")).rows
    assert row[5] == "never"


def test_sorting_by_a_header(as_admin, admin):
    fill(admin, 10)
    names = [row[0] for row in read_table(as_admin.get("/?sort=-name")).rows]
    assert names == sorted(names, reverse=True)
    assert names[0] == "model-0009"
    # The most recently deployed first: bge-embed (now), then model-0001 (a minute ago)...
    names = [row[0] for row in read_table(as_admin.get("/?sort=-deployed_at")).rows]
    assert names[:3] == ["bge-embed", "model-0001", "model-0002"]


def test_pages_of_fifty(as_admin, admin):
    fill(admin, 120)
    last = read_table(as_admin.get("/?page=3"))
    assert len(last.rows) == 120 - 2 * PER_PAGE
    assert last.rows[-1][0] == "model-0119"


def test_an_htmx_request_gets_only_the_table(as_admin, admin):
    fill(admin, 3)
    response = as_admin.get("/?sort=-name", headers={"HX-Request": "true"})
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="applications"')
    assert "<html" not in body and "<header" not in body and "<h1" not in body
    assert [t.name for t in response.templates][0] == "console/_applications.html"
    assert "console/home.html" not in [t.name for t in response.templates]
    names = [row[0] for row in read_table(response).rows]
    assert names == ["model-0002", "model-0001", "bge-embed"]

    page = as_admin.get("/?sort=-name")
    assert "<html" in page.content.decode()
    assert "console/home.html" in [t.name for t in page.templates]


def test_anonymous_is_sent_to_log_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"
    response = client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 302


def test_an_outsider_sees_none_of_acmes_applications(admin, outsider, as_outsider):
    fill(admin, 10)
    apply(SHORTEST.replace("bge-embed", "globex-embed"), outsider)
    response = as_outsider.get("/")
    assert response.status_code == 200
    assert [row[0] for row in read_table(response).rows] == ["globex-embed"]
    body = response.content.decode()
    assert "bge-embed" not in body and "model-0001" not in body and "Acme" not in body


def test_an_organisation_without_applications(as_viewer):
    table = read_table(as_viewer.get("/"))
    assert table.rows == [
        [
            "No models yet. Deploy one with Deploy model, Deploy from YAML, the REST API or "
            "manage.py app apply."
        ]
    ]


@pytest.mark.parametrize(
    "persona, sees_deploy_button",
    [("as_admin", True), ("as_deployer", True), ("as_viewer", False)],
)
def test_the_deploy_model_button_is_for_roles_that_may_deploy(request, persona, sees_deploy_button):
    body = request.getfixturevalue(persona).get("/").content.decode()
    assert ('href="/deploy/yaml/"' in body) is sees_deploy_button


@pytest.mark.parametrize("page", ["abc", "2", "0", "-1", "99999999999999999999", "1.5", ""])
def test_any_page_parameter_shows_a_page(as_viewer, page):
    response = as_viewer.get("/", {"page": page})
    assert response.status_code == 200


def test_a_page_past_the_end_shows_the_last(as_deployer, deployer):
    fill(deployer, PER_PAGE + 1)
    body = as_deployer.get("/", {"page": "7"}).content.decode()
    assert "model-0050" in body
