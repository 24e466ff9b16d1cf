"""Compare revisions on the overview: a unified diff of two revisions' manifests as YAML,
escaped, any two revisions, a revision that is not one named; Rollback stays as it was."""

from django.urls import reverse

from jobs import deploy as verbs
from jobs.overview.revision_diff import unified
from tests.helpers import SHORTEST

SECOND = SHORTEST + "      scaling:\n        minReplicas: 2\n"


def diff(client, **query):
    url = reverse("jobs:application-diff", args=["bge-embed"])
    return client.get(url, query, HTTP_HX_REQUEST="true")


def test_unified_diff_is_pure_and_classified():
    old = {"spec": {"name": "a", "replicas": 1}}
    new = {"spec": {"name": "a", "replicas": 2}}
    kinds = [(line.kind, line.text) for line in unified(old, new, "revision 1", "revision 2")]
    assert kinds[:3] == [
        ("header", "--- revision 1"),
        ("header", "+++ revision 2"),
        ("hunk", "@@ -1,3 +1,3 @@"),
    ]
    assert ("removed", "-  replicas: 1") in kinds and ("added", "+  replicas: 2") in kinds
    assert unified(old, old, "a", "b") == []


def test_diff_between_two_revisions_on_the_page(as_viewer, deployer):
    verbs.apply(SHORTEST, deployer)
    second = verbs.apply(SECOND, deployer).revision
    # a value a manifest could carry in a string field: shown as text, never as markup
    second.manifest["metadata"] = {"note": "<script>alert(1)</script>"}
    second.save(update_fields=["manifest"])
    page = as_viewer.get(reverse("jobs:application-detail", args=["bge-embed"])).content.decode()
    assert "Compare revisions" in page
    response = diff(as_viewer, **{"from": "1", "to": "2"})
    assert response.status_code == 200
    html = response.content.decode()
    assert '<span class="diff-added">+        minReplicas: 2</span>' in html
    assert "--- revision 1" in html and "+++ revision 2" in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    backwards = diff(as_viewer, **{"from": "2", "to": "1"}).content.decode()
    assert '<span class="diff-removed">-        minReplicas: 2</span>' in backwards
    same = diff(as_viewer, **{"from": "2", "to": "2"}).content.decode()
    assert "have the same manifest" in same


def test_a_revision_that_is_not_one_is_named(as_viewer, deployer):
    verbs.apply(SHORTEST, deployer)
    response = diff(as_viewer, **{"from": "1", "to": "7"})
    assert response.status_code == 400
    assert "to: &#x27;7&#x27; is not a revision of this application; pick one of 1." in (
        response.content.decode()
    )
    assert diff(as_viewer, **{"from": "x" * 5000, "to": "1"}).status_code == 400


def test_outsiders_get_404(as_outsider, deployer):
    verbs.apply(SHORTEST, deployer)
    assert diff(as_outsider, **{"from": "1", "to": "1"}).status_code == 404


def test_a_plain_request_gets_a_page(as_viewer, deployer):
    verbs.apply(SHORTEST, deployer)
    url = reverse("jobs:application-diff", args=["bge-embed"])
    html = as_viewer.get(url, {"from": "1", "to": "1"}).content.decode()
    assert "<h1>Compare revisions</h1>" in html and "have the same manifest" in html
