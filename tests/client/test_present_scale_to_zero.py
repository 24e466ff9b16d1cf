"""Where the command lines show scaling, a model with minReplicas 0 says it sleeps: the dry
run (`app apply --dry-run` and `servedeck apply --dry-run`) says what that means on the
target, `describe`/`get` carry the scaling and the wakes from sleep in their status block, and
`status` prints them."""

from datetime import timedelta
from io import StringIO

from django.core.management import call_command
from django.utils import timezone
from servedeck import present

from jobs.models import Wake
from jobs.present import described
from tests.gateway.support import make_app
from tests.helpers import SHORTEST

SLEEPY = SHORTEST + "      scaling:\n        minReplicas: 0\n        scaleToZeroAfter: 10m\n"


def sleepy_app(org):
    app = make_app(org, "chat", "http://127.0.0.1:9")
    app.manifest["spec"]["source"]["model"]["scaling"] = {
        "minReplicas": 0,
        "maxReplicas": 1,
        "scaleToZeroAfter": "10m",
    }
    app.save(update_fields=["manifest"])
    return app


def test_describe_and_status_show_the_scaling_and_the_wakes(org):
    app = sleepy_app(org)
    now = timezone.now()
    for seconds in (20, 40):
        Wake.objects.create(
            application=app,
            requested_at=now - timedelta(seconds=seconds),
            ready_at=now,
        )
    status = described(app)["status"]
    assert status["scaling"].startswith("fixed at 1 replica while awake; sleeps (no replica)")
    assert status["wakes"] == {"count": 2, "p50": "20.0 s", "p95": "40.0 s"}
    health = {
        "status": "healthy",
        "windows": {
            "5m": {"requests": 0, "successRate": None, "latencyP50Ms": None, "latencyP95Ms": None}
        },
    }
    lines = present.status_lines(described(app), health)
    assert "  scaling:      " + status["scaling"] in lines
    assert "  wakes:        2 (wake time p50 20.0 s, p95 40.0 s)" in lines


def test_a_model_that_never_sleeps_has_no_wakes(org):
    app = make_app(org, "chat", "http://127.0.0.1:9")
    app.manifest["spec"]["source"]["model"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}
    status = described(app)["status"]
    assert status["scaling"] == "fixed at 1 replica" and "wakes" not in status


def test_the_dry_run_says_what_sleeping_means_on_this_machine(admin, tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(SLEEPY)
    out = StringIO()
    call_command("app", "apply", "-f", str(path), "--dry-run", stdout=out, stderr=StringIO())
    said = out.getvalue()
    assert "  scale to zero: After 10m without a request through the gateway" in said
    assert "model server processes on this machine stop and their memory is freed" in said
