"""Low items: a plain 404 page (no exception text), the API's interactive docs from packaged
files, one log line for a 403."""

import logging

import pytest


@pytest.mark.parametrize("path", ["/nope/", "/models/missing/", "/access/tokens/x/nope/"])
def test_the_404_page_shows_no_exception_text(as_viewer, path):
    response = as_viewer.get(path)
    assert response.status_code == 404
    body = response.content.decode()
    assert "There is nothing at this address" in body
    for leak in ("Resolver404", "tried", "docs_url", "missing", "&#x27;"):
        assert leak not in body.split("<main")[1], leak


@pytest.mark.parametrize("path, status", [("/clusters/", 403), ("/models/missing/", 404)])
def test_a_refusal_logs_one_line_without_a_traceback(as_viewer, caplog, path, status):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert as_viewer.get(path).status_code == status
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    assert records[0].exc_info is None
    assert "Traceback" not in caplog.text


def test_the_api_docs_come_from_packaged_files(as_viewer):
    page = as_viewer.get("/api/v1/docs")
    assert page.status_code == 200
    body = page.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in body
    assert "cdn" not in body.lower() and "https://" not in body
    assert as_viewer.get("/static/ninja/swagger-ui-bundle.js").status_code == 200
    assert "/api/v1/docs" in as_viewer.get("/access/tokens/").content.decode()


def test_the_api_docs_are_open_like_the_openapi_document(client, db):
    assert client.get("/api/v1/docs").status_code == 200
    assert client.get("/api/v1/openapi.json").status_code == 200
