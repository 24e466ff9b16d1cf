"""The wizard as a newcomer meets it (issue 11): Back and Forward never lose or overwrite what
was saved, drafts are made once the Model step is valid and do not pile up, the name is
suggested from the model, Review and API say what is known, and errors use the field's label.
The browser side (htmx history, wizard.js) is walked in tests/browser/test_wizard.py."""

import html
import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from jobs.deploy import apply
from jobs.models import Draft
from jobs.present import local_profile_note
from jobs.wizard.names import base_name, suggest_name
from tests.helpers import SHORTEST
from tests.jobs.wizard.test_wizard_views import M, get_path, model_form, start, text, url

BGE = "BAAI/bge-m3"


def form_of(response, form_id: str = "wizard-form") -> dict:
    """What the form's inputs show as the page came (what wizard.js sends back as `shown`):
    text inputs, checked radios and checkboxes, selected options."""
    body = response.content.decode()
    form = body[body.index(f'id="{form_id}"') :]
    form = form[: form.index("</form>")]
    shown: dict[str, str] = {}
    for tag in re.findall(r"<input\b[^>]*>", form):
        name = re.search(r'\bname="([^"]+)"', tag)
        if not name or re.search(r'type="(submit|button)"', tag):
            continue
        kind = re.search(r'type="([^"]+)"', tag)
        if kind and kind.group(1) in ("radio", "checkbox") and " checked" not in tag:
            continue
        value = re.search(r'\bvalue="([^"]*)"', tag)
        default = "on" if kind and kind.group(1) == "checkbox" else ""
        shown[name.group(1)] = html.unescape(value.group(1)) if value else default
    for name, inner in re.findall(r'<select\b[^>]*name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        options = re.findall(r'<option value="([^"]*)"([^>]*)>', inner)
        chosen = [v for v, attrs in options if "selected" in attrs] or [v for v, _ in options[:1]]
        shown[name] = html.unescape(chosen[0]) if chosen else ""
    for name, inner in re.findall(
        r'<textarea\b[^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', form, re.S
    ):
        shown[name] = html.unescape(inner.strip("\n"))
    shown.pop("shown", None)
    return shown


def post_form(client, address, shown: dict, changes: dict, go: str = "next", **extra):
    """Post a step as the browser does: the inputs as shown, with the user's changes, and what
    the form showed when it came."""
    data = {**shown, **changes, "shown": json.dumps(shown), "go": go}
    return client.post(address, data, **extra)


# ---- 2. Back, Forward and reload never lose or overwrite what was saved ----


def test_a_step_is_never_cached_and_leaves_no_copy_in_htmx_history(as_deployer):
    draft = start(as_deployer)
    for address, headers in (
        (url("compute", draft), {}),
        (url("compute", draft), {"HTTP_HX_REQUEST": "true"}),
    ):
        response = as_deployer.get(address, **headers)
        assert "no-store" in response["Cache-Control"]
        assert "HX-Request" in response["Vary"]
        assert 'hx-history="false"' in response.content.decode()
        assert f'name="stamp" value="{form_of(response)["stamp"]}"' in response.content.decode()


def test_next_on_a_page_back_restored_keeps_what_was_saved(as_deployer):
    """Memory 6Gi and CPU 3 saved; Back shows the old Compute page (its inputs empty) and Next
    there writes nothing the user did not change."""
    draft = start(as_deployer)
    old_page = as_deployer.get(url("compute", draft))
    shown = form_of(old_page)
    response = post_form(as_deployer, url("compute", draft), shown, {"memory": "6Gi", "cpu": "3"})
    assert response["Location"] == url("access", draft)
    draft.refresh_from_db()
    saved = draft.manifest
    assert get_path(saved, f"{M}.resources.memory") == "6Gi"
    assert get_path(saved, f"{M}.resources.cpu") == "3"

    response = post_form(as_deployer, url("compute", draft), shown, {})  # the old page, as it was
    assert response["Location"] == url("access", draft)
    draft.refresh_from_db()
    assert draft.manifest == saved
    page = as_deployer.get(url("compute", draft))  # and shown again as saved
    assert form_of(page)["memory"] == "6Gi" and form_of(page)["cpu"] == "3"


def test_next_writes_only_the_fields_the_user_changed(as_deployer):
    draft = start(as_deployer)
    as_deployer.post(url("api", draft), {"api_format": "OpenAI", "go": "next"})
    draft.refresh_from_db()
    before = draft.manifest
    # Written in YAML before (no input of the wizard shows it): Compute's Next keeps it.
    before["spec"]["source"]["model"].setdefault("engine", {})["tensorParallelSize"] = 1
    Draft.objects.filter(pk=draft.pk).update(manifest=before)
    page = as_deployer.get(url("compute", draft))
    changes = {"concurrency": "2"}
    response = post_form(as_deployer, url("compute", draft), form_of(page), changes)
    assert response.status_code == 302
    draft.refresh_from_db()
    after = draft.manifest
    # Nothing else was written: without the requests at once, the draft is the one before.
    assert get_path(after, M)["serving"].pop("maxConcurrentRequests") == 2
    assert after == before


def test_a_stale_form_that_would_overwrite_a_newer_value_is_shown_again(as_deployer):
    draft = start(as_deployer)
    old_page = as_deployer.get(url("compute", draft))
    shown = form_of(old_page)
    post_form(as_deployer, url("compute", draft), shown, {"memory": "6Gi"})  # another tab
    response = post_form(as_deployer, url("compute", draft), shown, {"memory": "9Gi"})
    assert response.status_code == 409
    body = text(response)
    assert "This step was saved again after this page showed it" in body
    assert "Your change to Memory was not saved" in body
    assert form_of(response)["memory"] == "6Gi"  # the value saved now
    draft.refresh_from_db()
    assert get_path(draft.manifest, f"{M}.resources.memory") == "6Gi"
    # Made again on the page shown now, it is saved.
    response = post_form(as_deployer, url("compute", draft), form_of(response), {"memory": "9Gi"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert get_path(draft.manifest, f"{M}.resources.memory") == "9Gi"


def test_a_stale_form_that_changes_an_untouched_field_is_saved(as_deployer):
    draft = start(as_deployer)
    shown = form_of(as_deployer.get(url("compute", draft)))
    post_form(as_deployer, url("compute", draft), shown, {"memory": "6Gi"})
    post_form(as_deployer, url("compute", draft), shown, {"cpu": "3"}, go="back")
    draft.refresh_from_db()
    assert get_path(draft.manifest, f"{M}.resources.memory") == "6Gi"
    assert get_path(draft.manifest, f"{M}.resources.cpu") == "3"


def test_back_then_next_on_the_first_model_step_makes_no_second_draft(as_deployer):
    page = as_deployer.get(reverse("jobs:wizard"))
    shown = form_of(page)
    assert shown["start"]
    typed = {
        "name": "qwen-chat",
        "repo": model_form()["repo"],
        "revision": model_form()["revision"],
    }
    first = post_form(as_deployer, reverse("jobs:wizard"), shown, typed)
    draft = Draft.objects.get()
    assert first["Location"] == url("check", draft)
    assert first["X-Wizard-Draft"] == url("model", draft)  # Back goes to the draft's Model step
    again = post_form(as_deployer, reverse("jobs:wizard"), shown, typed)  # Back, then Next
    assert again["Location"] == url("check", draft)
    assert Draft.objects.count() == 1
    page = as_deployer.get(url("model", draft))
    assert form_of(page)["name"] == "qwen-chat"


# ---- 3. drafts do not pile up ----


def test_a_refused_first_step_makes_no_draft(as_deployer):
    for _ in range(3):
        response = as_deployer.post(reverse("jobs:wizard"), model_form(repo="", revision=""))
        assert response.status_code == 400
    assert not Draft.objects.exists()


def test_drafts_are_listed_collapsed_newest_first_with_a_confirmed_discard(as_deployer, deployer):
    older = start(as_deployer, name="older")
    newer = start(as_deployer, name="newer")
    Draft.objects.filter(pk=older.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    body = text(as_deployer.get(reverse("jobs:wizard")))
    listing = body[body.index('<details class="drafts-list">') :]
    assert '<details class="drafts-list"> <summary><h3 id="drafts-h">Your drafts (2)</h3>' in body
    assert listing.index(">newer<") < listing.index(">older<")
    assert 'data-confirm="Discard the draft newer? Its saved steps are lost."' in body
    assert 'data-confirm="Discard all 2 drafts? Their saved steps are lost."' in body
    assert "untouched for 14 days is discarded" in body
    assert body.index('id="drafts-h"') < body.index('id="wz-name"')
    assert newer.key in body


def test_discard_all_discards_only_my_drafts(as_deployer, as_admin):
    start(as_deployer, name="one")
    start(as_deployer, name="two")
    start(as_admin, name="theirs")
    response = as_deployer.post(reverse("jobs:wizard-discard-all"))
    assert response["Location"] == reverse("jobs:wizard")
    assert list(Draft.objects.values_list("manifest__spec__name", flat=True)) == ["theirs"]
    assert "2 drafts discarded." in text(as_deployer.get(reverse("jobs:wizard")))


def test_untouched_drafts_expire_when_drafts_are_listed(as_deployer, settings):
    settings.SERVEDECK_DRAFT_DAYS = 3
    stale = start(as_deployer, name="stale")
    fresh = start(as_deployer, name="fresh")
    Draft.objects.filter(pk=stale.pk).update(
        updated_at=timezone.now() - timedelta(days=3, minutes=1)
    )
    body = text(as_deployer.get(reverse("jobs:wizard")))
    assert "untouched for 3 days is discarded" in body
    assert list(Draft.objects.values_list("key", flat=True)) == [fresh.key]


def test_opening_edit_lists_no_draft_until_something_changes(as_deployer, deployer):
    apply(SHORTEST, deployer)
    as_deployer.post(reverse("jobs:application-edit", args=["bge-embed"]))
    as_deployer.post(reverse("jobs:application-edit", args=["bge-embed"]))
    assert Draft.objects.count() == 1
    assert "Your drafts" not in text(as_deployer.get(reverse("jobs:wizard")))
    draft = Draft.objects.get()
    as_deployer.post(url("compute", draft), {"min_replicas": "2", "go": "next"})
    assert "Your drafts (1)" in text(as_deployer.get(reverse("jobs:wizard")))


# ---- 4. the name, suggested from the model ----


@pytest.mark.parametrize(
    "repo, taken, name",
    [
        ("BAAI/bge-m3", set(), "bge-m3"),
        ("Qwen/Qwen2.5-0.5B-Instruct", set(), "qwen2-5-0-5b-instruct"),
        ("hf://Qwen/Qwen2.5-7B-Instruct:abc", set(), "qwen2-5-7b-instruct"),
        ("BAAI/bge-m3", {"bge-m3"}, "bge-m3-2"),
        ("BAAI/bge-m3", {"bge-m3", "bge-m3-2"}, "bge-m3-3"),
        ("org/" + "a" * 70, {"a" * 63}, "a" * 61 + "-2"),
        ("org/--__--", set(), ""),
    ],
)
def test_a_free_name_from_the_repository(repo, taken, name):
    assert suggest_name(repo, taken) == name
    assert len(name) <= 63


def test_base_name_is_a_dns_label():
    assert base_name("TheBloke/Llama-2-7B-Chat-GGUF") == "llama-2-7b-chat-gguf"


def test_a_picked_model_suggests_a_name_no_application_or_draft_has(as_deployer, deployer):
    apply(SHORTEST.replace("bge-embed", "bge-m3"), deployer)
    pick = reverse("jobs:wizard-hub-pick")
    assert 'data-suggested-name="bge-m3-2"' in text(as_deployer.get(pick, {"repo": BGE}))
    draft = start(as_deployer, name="bge-m3-2", repo=BGE)
    assert 'data-suggested-name="bge-m3-3"' in text(as_deployer.get(pick, {"repo": BGE}))
    # The draft's own name is not taken from itself.
    own = as_deployer.get(pick, {"repo": BGE, "draft": draft.key})
    assert 'data-suggested-name="bge-m3-2"' in text(own)


def test_a_missing_name_is_said_plainly_with_the_models_own_example(as_deployer):
    response = as_deployer.post(reverse("jobs:wizard"), model_form(name="", repo=BGE))
    assert response.status_code == 400
    body = text(response)
    assert (
        "Give the model a name: lowercase letters, digits and dashes, up to 63 characters, "
        "for example bge-m3." in body
    )
    assert "DNS-1123" not in body and "bge-embed" not in body
    assert 'placeholder="bge-m3"' in body


# ---- 6. Review and API say what is known ----


def test_api_for_a_text_model_promises_no_media(as_deployer):
    draft = start(as_deployer)
    body = text(as_deployer.get(url("api", draft)))
    assert "what one request may carry" not in body
    assert "This model takes text in, so there is nothing to limit per request." in body


def test_review_on_a_local_profile_says_what_app_render_says(as_deployer, deployer, tmp_path):
    draft = start(as_deployer)
    body = text(as_deployer.get(url("review", draft)))
    note = local_profile_note("local")
    assert note in html.unescape(body)
    assert "nothing is rendered for Kubernetes" not in body
    manifest = tmp_path / "model.yaml"
    manifest.write_text(SHORTEST)
    out, err = StringIO(), StringIO()
    call_command(
        "app",
        "render",
        "-f",
        str(manifest),
        "--user",
        deployer.user.username,
        stdout=out,
        stderr=err,
    )
    assert "kind: InferenceService" in out.getvalue()
    assert note in err.getvalue()


# ---- 9. errors beside a field speak in its label ----


def test_a_compute_error_uses_the_fields_label_not_the_manifest_path(as_deployer):
    draft = start(as_deployer)
    response = as_deployer.post(url("compute", draft), {"context": "lots", "go": "next"})
    assert response.status_code == 400
    found = re.search(r'id="context-error"[^>]*>([^<]*)', text(response))
    assert found, text(response)[:3000]
    message = found.group(1)
    assert message.startswith("Context window: ")
    assert "maxContextTokens" not in message and "serving." not in message


def test_other_fields_an_error_names_are_named_by_their_labels(as_deployer):
    draft = start(as_deployer)
    data = {"min_replicas": "4", "max_replicas": "4", "go": "next"}
    response = as_deployer.post(url("compute", draft), data)
    found = re.search(r'id="min-error"[^>]*>([^<]*)', text(response))
    assert found, text(response)[:3000]
    message = found.group(1)
    assert message.startswith("Min replicas: ")
    assert "resources.cpu" not in message and "resources.memory" not in message
    assert "lower CPU or memory" in message


@pytest.mark.usefixtures("prod")
def test_review_refused_by_the_cluster_still_says_the_runtime_and_scaling(as_deployer, kube):
    draft = start(as_deployer, profile="prod")
    too_many = "spec.predictor: Invalid value: too many GPUs"
    kube.fail_next(422, too_many, resource="inferenceservices")
    body = text(as_deployer.get(url("review", draft)))
    assert "Refused." in body and "too many GPUs" in body
    assert "<dt>Runtime</dt><dd>vLLM (vllm runtime)</dd>" in body
    assert "<dt>Scaling</dt><dd>fixed at 1 replica</dd>" in body
    assert "not chosen" not in body and "unknown" not in body


def test_a_link_offers_a_model_with_a_free_name(as_deployer, deployer):
    apply(SHORTEST.replace("bge-embed", "bge-m3"), deployer)
    response = as_deployer.get(reverse("jobs:wizard"), {"uri": BGE, "profile": "local"})
    shown = form_of(response)
    assert (shown["repo"], shown["name"], shown["profile"]) == (BGE, "bge-m3-2", "local")
    assert not Draft.objects.exists()  # a draft only once Next finds the Model step valid
