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
        run, secret = runs.start(application, deployer)
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
