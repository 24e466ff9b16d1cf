"""The model page's Benchmark button: start a benchmark of the running revision on a worker
thread (jobs/benchmark/runs.py); its results appear on the page when it ends."""

from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from jobs.access import application_to_change
from jobs.benchmark import runs
from jobs.deploy import ActionError


@require_POST
def start(request, name):
    application, deployer = application_to_change(request.membership, name)
    try:
        run, secret = runs.start(application, deployer, _revision(request.POST.get("revision")))
    except ActionError as error:
        messages.error(request, str(error))
    else:
        runs.launch(run, secret)
        messages.success(
            request,
            f"Benchmark of {name} revision {run.revision.number} started: its results appear "
            "under Benchmarks when it ends (at most a few minutes).",
        )
    return redirect("jobs:application-detail", name=name)


def _revision(given: str | None) -> int | None:
    """The revision the form names (during a Canary rollout), None for the serving one; text
    that is not a revision number names none the benchmark accepts (runs.start says which)."""
    if not given:
        return None
    return int(given) if given.isascii() and given.isdigit() and len(given) <= 9 else 0
