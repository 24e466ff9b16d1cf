"""Bug 7: the Clusters and Model masters tables sort by `?sort=` and answer an htmx request
(their sort headers') with the table alone, like the dashboard's."""

import re

import pytest

from jobs.models import Cluster, Profile
from models_catalog.models import ModelMaster
from tests.helpers import client_for

HTMX = {"HX-Request": "true"}


def first_cells(html: str, table_id: str) -> list[str]:
    """The text of the first cell of each body row of the table inside `<div id=table_id>`."""
    start = html.index(f'<div id="{table_id}"')
    body = html[start:].split("<tbody", 1)[1].split("</tbody>", 1)[0]
    cells = re.findall(r"<tr[^>]*>\s*<td[^>]*>(.*?)</td>", body, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]


@pytest.fixture
def clusters(admin):
    org = admin.organization
    Profile.objects.filter(organization=org).delete()  # the organisation's own "local" ones
    Cluster.objects.filter(organization=org).delete()
    for name in ("bravo", "alpha", "charlie"):
        cluster = Cluster.objects.create(organization=org, name=name)
        Profile.objects.create(organization=org, name=f"p-{name}", cluster=cluster)
    return client_for(admin)


def test_clusters_sort_by_the_query(clusters):
    html = clusters.get("/clusters/?sort=-name").content.decode()
    assert first_cells(html, "clusters") == ["charlie", "bravo", "alpha"]
    html = clusters.get("/clusters/?sort=name").content.decode()
    assert first_cells(html, "clusters") == ["alpha", "bravo", "charlie"]
    # the profiles table beside it sorts by its own parameter
    assert first_cells(html, "profiles") == ["p-alpha", "p-bravo", "p-charlie"]
    html = clusters.get("/clusters/?profiles-sort=-name").content.decode()
    assert first_cells(html, "profiles") == ["p-charlie", "p-bravo", "p-alpha"]


def test_the_clusters_sort_headers_link_with_htmx(clusters):
    html = clusters.get("/clusters/").content.decode()
    assert 'href="?sort=name"' in html
    assert 'href="?profiles-sort=name"' in html
    assert html.count('hx-boost="true"') >= 2


def test_an_htmx_sort_of_clusters_gets_only_that_table(clusters):
    response = clusters.get("/clusters/?sort=-name", headers={**HTMX, "HX-Target": "clusters"})
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="clusters"')
    assert "<html" not in body and "<h1" not in body and 'id="profiles"' not in body
    assert first_cells(body, "clusters") == ["charlie", "bravo", "alpha"]
    response = clusters.get(
        "/clusters/?profiles-sort=-name", headers={**HTMX, "HX-Target": "profiles"}
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="profiles"')
    assert "<html" not in body and 'id="clusters"' not in body
    assert first_cells(body, "profiles") == ["p-charlie", "p-bravo", "p-alpha"]


@pytest.fixture
def masters(admin):
    for model_id in ("org/bravo", "org/alpha", "org/charlie"):
        ModelMaster.objects.create(organization=admin.organization, model_id=model_id)
    return client_for(admin)


def test_model_masters_sort_by_the_query(masters):
    html = masters.get("/catalog/masters/?sort=-model_id").content.decode()
    assert first_cells(html, "masters") == ["org/charlie", "org/bravo", "org/alpha"]
    html = masters.get("/catalog/masters/?sort=model_id").content.decode()
    assert first_cells(html, "masters") == ["org/alpha", "org/bravo", "org/charlie"]
    assert 'href="?sort=model_id"' in html or 'href="?sort=-model_id"' in html


def test_an_htmx_sort_of_model_masters_gets_only_the_table(masters):
    response = masters.get("/catalog/masters/?sort=-model_id", headers=HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="masters"')
    assert "<html" not in body and "<h1" not in body
    assert first_cells(body, "masters") == ["org/charlie", "org/bravo", "org/alpha"]
