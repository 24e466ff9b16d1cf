"""A Canary rollout on every surface: the model page (the split, both revisions' figures side by
side, the decisions, Promote and Abort for deployers only, the deploy history's marks), the REST
API (GET rollout, POST promote and abort, refusals as 409 with what to do) and `manage.py app
promote|abort`. The rollout is set in the database as the reconciler leaves it mid-step."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from accesspolicies.models import AuditEntry
from jobs import deploy as verbs
from jobs.manifest.rollout import RolloutPlan
from jobs.models import Revision, Rollout, UsageMinute
from tests.helpers import SHORTEST, api_error, bearer

URL = "/api/v1/applications/bge-embed"


@pytest.fixture
def rolling(deployer):
    """bge-embed at revision 1, revision 2 its canary at 10% (step 1 of 10%, 50%), with a
    minute's figures of each metered."""
    app = verbs.apply(SHORTEST, deployer).application
    Revision.objects.create(
        application=app, number=2, manifest=app.manifest, outcome="Applied", release="Canary"
    )
    now = timezone.now()
    rollout = Rollout.objects.create(
        application=app,
        stable_revision=1,
        canary_revision=2,
        state=Rollout.State.PROGRESSING,
        plan=RolloutPlan(strategy="Canary").as_dict(),
        weight=10,
        step_started_at=now,
        canary_phase="Running",
        canary_endpoints=["http://127.0.0.1:9"],
        decisions=[
            {"at": now.isoformat(), "step": 1, "weight": 10, "decision": "step", "by": "system",
             "reason": "step 1: 10%.", "figures": {}},
        ],
    )  # fmt: skip
    minute = now.replace(second=0, microsecond=0)
    for revision, requests, errors in ((1, 90, 0), (2, 10, 1)):
        UsageMinute.objects.create(
            minute=minute, scope=f"o.a{app.pk}.k-.r{revision}", organization=app.organization,
            application=app, revision=revision, requests=requests, errors_5xx=errors,
            latency_le_100ms=requests,
        )  # fmt: skip
    return app, rollout


def page(client) -> str:
    response = client.get(reverse("jobs:application-detail", args=["bge-embed"]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_page_shows_the_split_the_figures_and_the_decisions(rolling, as_deployer):
    html = page(as_deployer)
    panel = html.split('<section class="rollout"', 1)[1].split("</section>", 1)[0]
    assert "Canary rollout: revision 2 over revision 1" in panel
    assert "<strong>90%</strong>" in panel and "<strong>10%</strong>" in panel
    assert "step 1 of 3: 10%, 50%, 100%" in panel
    rows = dict(
        (label, (a, b))
        for label, a, b in re.findall(
            r"<th scope=\"row\">([^<]+)</th><td>([^<]*)</td><td>([^<]*)</td>", panel
        )
    )
    assert rows["Requests"] == ("90", "10") and rows["Error rate"] == ("0.0%", "10.0%")
    assert "<strong>step</strong> by system: step 1: 10%." in panel
    assert ">Promote</button>" in html and ">Abort rollout</button>" in html
    assert '<span class="badge release">Canary</span>' in html  # deploy history


def test_viewers_see_the_rollout_but_not_its_buttons_and_may_not_decide(rolling, as_viewer):
    html = page(as_viewer)
    assert "Canary rollout: revision 2" in html and ">Promote</button>" not in html
    for verb in ("promote", "abort"):
        url = reverse(f"jobs:application-{verb}", args=["bge-embed"])
        assert as_viewer.post(url).status_code == 403
        assert as_viewer.get(url).status_code == 405
    assert Rollout.objects.get().state == "Progressing"


def test_outsiders_do_not_find_it(rolling, as_outsider):
    url = reverse("jobs:application-abort", args=["bge-embed"])
    assert as_outsider.post(url).status_code == 404
    assert Rollout.objects.get().state == "Progressing"


def test_abort_on_the_page_stops_the_canary_and_marks_the_history(rolling, as_deployer, deployer):
    url = reverse("jobs:application-abort", args=["bge-embed"])
    response = as_deployer.post(url, follow=True)
    assert "revision 2 is aborted" in response.content.decode()
    rollout = Rollout.objects.get()
    assert rollout.state == "Aborted" and rollout.weight == 0
    assert AuditEntry.objects.filter(action="application.abort", actor=deployer.user).exists()
    html = page(as_deployer)
    assert '<span class="badge release">Aborted</span>' in html
    assert ">Abort rollout</button>" not in html
    again = as_deployer.post(url, follow=True).content.decode()
    assert "has no Canary rollout under way" in again


def test_the_api_reads_promotes_and_refuses(rolling, client, deployer, viewer):
    client.defaults.update(bearer(viewer))
    got = client.get(URL + "/rollout")
    assert got.status_code == 200 and got.json()["weight"] == 10 and got.json()["steps"] == [10, 50]
    refused = client.post(URL + "/promote")
    assert refused.status_code == 403
    client.defaults.update(bearer(deployer))
    promoted = client.post(URL + "/promote")
    assert promoted.status_code == 200, promoted.content
    assert promoted.json()["state"] == "Promoting" and promoted.json()["weight"] == 100
    again = client.post(URL + "/abort")
    assert again.status_code == 409
    assert (
        "being promoted" in api_error(again)["message"]
        and "app rollback" in api_error(again)["message"]
    )
    history = client.get(URL + "/history").json()
    assert [r["release"] for r in history] == ["Promoted", ""]


def test_the_api_says_when_there_is_no_rollout(deployer, client):
    verbs.apply(SHORTEST, deployer)
    client.defaults.update(bearer(deployer))
    assert client.get(URL + "/rollout").status_code == 404
    refused = client.post(URL + "/abort")
    assert (
        refused.status_code == 409
        and "spec.rollout.strategy Canary" in api_error(refused)["message"]
    )


def test_manage_py_app_abort(rolling, deployer):
    out = StringIO()
    call_command("app", "abort", "bge-embed", "--user", deployer.user.username, stdout=out)
    assert out.getvalue().startswith("application/bge-embed revision 2 aborted: Aborted, 0%")
    with pytest.raises(CommandError, match="no Canary rollout under way"):
        call_command("app", "promote", "bge-embed", "--user", deployer.user.username, stdout=out)


def test_a_step_without_enough_requests_waits_and_says_so_once(rolling):
    from datetime import timedelta

    from accesspolicies.models import ChangeCounter
    from jobs.rollouts import steps

    app, rollout = rolling
    due = rollout.step_started_at + timedelta(minutes=11)
    before = ChangeCounter.read()
    for _ in range(2):
        rollout = Rollout.objects.select_related("application").get()
        assert steps.judge_step(rollout, RolloutPlan.of_dict(rollout.plan), due) == "wait"
    rollout.refresh_from_db()
    assert [d["decision"] for d in rollout.decisions] == ["step", "wait"]
    assert (
        "revision 1 has answered 90 and revision 2 has answered 10 of the 100"
        in (rollout.decisions[-1]["reason"])
    )
    assert rollout.state == "Progressing" and rollout.weight == 10
    assert ChangeCounter.read() == before  # the split did not change: no gateway reloads


def test_a_decision_reaches_the_live_pages(rolling, deployer, django_capture_on_commit_callbacks):
    import asyncio

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from jobs.lifecycle import group_name

    app, _ = rolling
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(app), channel)
    with django_capture_on_commit_callbacks(execute=True):
        verbs.abort(app, deployer)

    async def receive():
        return await asyncio.wait_for(layer.receive(channel), timeout=0.5)

    message = async_to_sync(receive)()
    assert message["type"] == "application.status" and message["name"] == "bge-embed"
    # and what the page then renders says so
    from jobs.live.fragments import Moment

    assert "<strong>abort</strong> by user" in Moment(app).render("status").html
