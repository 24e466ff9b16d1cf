"""When an application's cluster does not answer: the API says 503 with what is down (never a
path on the console's host), and the application can still leave the console, from the API,
the command line and its page, saying what may remain on the cluster."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from jobs import deploy as verbs
from jobs.backends.local.backend import LocalBackend
from jobs.models import Application, Revision
from tests.fakes.kube_objects import PROD_NAMESPACE
from tests.helpers import SHORTEST, api_error, bearer

URL = "/api/v1/applications"
MANIFEST = SHORTEST.replace("profileName: local", "profileName: prod")


@pytest.fixture
def api(client, deployer):
    client.defaults.update(bearer(deployer))
    return client


@pytest.fixture
def on_prod(prod, deployer, kube):
    return verbs.apply(MANIFEST, deployer).application


@pytest.mark.parametrize("verb", ["restart", "stop", "start"])
def test_an_operation_on_a_cluster_that_is_down_is_503_without_host_paths(
    api, on_prod, prod, kube, verb
):
    with kube.down():
        response = api.post(f"{URL}/bge-embed/{verb}")
    assert response.status_code == 503
    message = api_error(response)["message"]
    assert "cluster prod is unavailable" in message and "connection refused" in message
    assert str(kube.kubeconfig_path) not in response.content.decode()
    assert "kubeconfig" not in message


def test_delete_on_a_cluster_that_is_down_is_503_and_keeps_the_application(api, on_prod, kube):
    with kube.down():
        response = api.delete(f"{URL}/bge-embed")
    assert response.status_code == 503
    assert "keepOnCluster" in api_error(response)["message"]
    assert str(kube.kubeconfig_path) not in response.content.decode()
    assert Application.objects.filter(pk=on_prod.pk).exists()


def test_delete_with_keep_on_cluster_leaves_the_console_and_says_what_stays(api, on_prod, kube):
    with kube.down():
        response = api.delete(f"{URL}/bge-embed?keepOnCluster=true")
    assert response.status_code == 200, response.content
    left = response.json()["leftOnCluster"]
    assert "InferenceService bge-embed" in left and PROD_NAMESPACE in left
    assert "servedeck.io/application=bge-embed" in left
    assert not Application.objects.filter(pk=on_prod.pk).exists()
    assert kube.get("InferenceService", "bge-embed", PROD_NAMESPACE) is not None  # still there


def test_delete_with_keep_on_cluster_on_a_cluster_that_answers_deletes_everything(
    api, on_prod, kube
):
    response = api.delete(f"{URL}/bge-embed?keepOnCluster=true")
    assert response.status_code == 204
    assert kube.get("InferenceService", "bge-embed", PROD_NAMESPACE) is None


def test_the_command_line_deletes_from_the_console_only_when_told(on_prod, kube):
    out, err = StringIO(), StringIO()
    with kube.down():
        with pytest.raises(Exception, match="keep-on-cluster"):
            call_command("app", "delete", "bge-embed", "--user", "dan", stdout=out, stderr=err)
        assert Application.objects.filter(pk=on_prod.pk).exists()
        call_command(
            "app",
            "delete",
            "bge-embed",
            "--keep-on-cluster",
            "--user",
            "dan",
            stdout=out,
            stderr=err,
        )
    assert "application/bge-embed deleted" in out.getvalue()
    assert "may still hold InferenceService bge-embed" in err.getvalue()
    assert not Application.objects.filter(pk=on_prod.pk).exists()


def test_the_page_offers_the_delete_from_the_console_only(as_deployer, on_prod, kube):
    delete_url = reverse("jobs:application-delete", args=["bge-embed"])
    typed = {"confirm_name": "bge-embed"}
    with kube.down():
        response = as_deployer.post(delete_url, typed)
        assert response.status_code == 302 and "delete=unavailable" in response["Location"]
        page = as_deployer.get(response["Location"]).content.decode()
        assert "Delete from the console only" in page and "is unavailable" in page
        response = as_deployer.post(delete_url, {"keep_on_cluster": "1"})
        assert response.status_code == 400  # the name is typed again, in this form
        page = response.content.decode()
        assert 'id="confirm-name-console-error"' in page and "Nothing was deleted" in page
        assert Application.objects.filter(pk=on_prod.pk).exists()
        response = as_deployer.post(delete_url, {"keep_on_cluster": "1", **typed}, follow=True)
    assert "may still hold InferenceService bge-embed" in response.content.decode()
    assert not Application.objects.filter(pk=on_prod.pk).exists()


def test_a_deploy_to_a_cluster_that_is_down_records_it_without_host_paths(prod, deployer, kube):
    with kube.down():
        applied = verbs.apply(MANIFEST, deployer)
    application = applied.application
    application.refresh_from_db()
    assert applied.revision.outcome == Revision.Outcome.FAILED
    assert application.phase == "Failed" and "connection refused" in application.reason
    assert str(kube.kubeconfig_path) not in application.next_step


def test_an_unexpected_failure_of_the_backend_is_recorded_not_left_pending(api, monkeypatch):
    def broken(self, application, revision, objects=None):
        raise RuntimeError("the backend broke half-way")

    monkeypatch.setattr(LocalBackend, "apply", broken)  # our own backend, not a client library
    response = api.post(URL, data=SHORTEST, content_type="application/yaml")
    assert response.status_code == 500
    api_error(response)
    revision = Revision.objects.get(application__name="bge-embed")
    assert revision.outcome == Revision.Outcome.FAILED
    assert "may hold part of it" in revision.message
    assert Application.objects.get(name="bge-embed").phase == "Failed"
