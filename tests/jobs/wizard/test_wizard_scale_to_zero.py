"""The wizard's Compute step offers scale to zero (min replicas 0, Sleep after) with help
text, saves it over htmx like every field, refuses a bad duration beside its input naming the
field, and Review explains what it means on the profile's target."""

import re

from jobs.models import Draft
from tests.jobs.wizard.test_wizard_views import M, get_path, start, text, url


def test_compute_offers_min_replicas_0_and_sleep_after_with_help(as_deployer):
    draft = start(as_deployer)
    body = text(as_deployer.get(url("compute", draft)))
    assert re.search(r'name="min_replicas" min="0"', body)
    assert "0 lets the model sleep when idle" in body
    assert 'name="scale_to_zero_after"' in body and 'placeholder="15m"' in body
    assert "On this machine its processes stop and their memory is freed." in body


def test_sleep_after_is_saved_over_htmx_and_review_explains_it(as_deployer):
    draft = start(as_deployer)
    response = as_deployer.post(
        url("compute", draft),
        {"gpu_kind": "cpu", "min_replicas": "0", "scale_to_zero_after": "2m", "go": "next"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200, text(response)[:2000]
    assert "<html" not in text(response)
    assert response["HX-Push-Url"] == url("access", draft)
    draft = Draft.objects.get(pk=draft.pk)
    assert get_path(draft.manifest, f"{M}.scaling.minReplicas") == 0
    assert get_path(draft.manifest, f"{M}.scaling.scaleToZeroAfter") == "2m"
    review = text(as_deployer.get(url("review", draft)))
    assert "Scale to zero" in review
    assert "After 2m without a request through the gateway" in review
    assert "memory is freed" in review


def test_a_bad_sleep_after_is_refused_beside_its_input_naming_the_field(as_deployer):
    draft = start(as_deployer)
    response = as_deployer.post(
        url("compute", draft),
        {"gpu_kind": "cpu", "min_replicas": "0", "scale_to_zero_after": "soon", "go": "next"},
    )
    assert response.status_code == 400
    body = text(response)
    found = re.search(r'id="sleep-error"[^>]*>([^<]*)', body)
    assert found, body[:3000]
    message = found.group(1)
    assert message.startswith("Sleep after:") and "soon" in message and "15m" in message
    assert 'aria-invalid="true"' in body


def test_a_viewer_cannot_set_it(as_viewer, as_deployer):
    draft = start(as_deployer)
    response = as_viewer.post(
        url("compute", draft), {"min_replicas": "0", "scale_to_zero_after": "1m"}
    )
    assert response.status_code in (403, 404)
    assert get_path(Draft.objects.get(pk=draft.pk).manifest, f"{M}.scaling.minReplicas") != 0
