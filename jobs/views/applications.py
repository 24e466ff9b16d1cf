"""Pages of one application: its manifest, deploy history and events; rollback and delete."""

import yaml
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from accesspolicies.access import require
from jobs import deploy as verbs
from jobs.access import application_to_change, as_deployer, get_application
from jobs.benchmark import shown as benchmarks
from jobs.live.fragments import overview_context, shown
from jobs.models import Profile
from jobs.overview import snippets
from jobs.status.phases import Phase
from jobs.usage.readers import health_of
from jobs.views import overview


def to_yaml(manifest: dict) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)


def detail(request, name):
    application = get_application(request.membership, name)
    offer = request.GET.get("delete") == "unavailable"
    return _detail_page(request, application, offer_delete_from_console=offer)


def _detail_page(request, application, status: int = 200, **more):
    revisions = list(application.revisions.select_related("created_by")[:50])
    top = overview_context(application)  # the live top: status, cards, events, the rollout
    rollout = top["rollout"]["rollout"] if top["rollout"] and top["rollout"]["active"] else None
    context = {
        "application": application,
        "manifest_yaml": to_yaml(application.manifest),
        "revisions": revisions,
        **overview.page_context(application, revisions, request.membership),
        **top,
        **benchmarks.page_context(application, revisions, rollout),
        "may_deploy": request.membership.may("deploy"),
        "offer_delete_from_console": False,
        **call_from_code(request, application),
        **more,
    }
    return render(request, "jobs/application_detail.html", context, status=status)


@require_safe
def health(request, name):
    """An endpoint's health: its status, success rate and latency over 5 minutes and 24 hours."""
    application = get_application(request.membership, name)
    health = health_of(application)
    for window in health["windows"].values():  # as the overview's cards write it
        window["success_rate_percent"] = shown(window)["success_rate"]
    context = {"application": application, "health": health}
    return render(request, "jobs/application_health.html", context)


def call_from_code(request, application) -> dict:
    """The "Call it from code" snippets: the console's own origin (or the verified domain)."""
    task = snippets.application_task(application.manifest)
    if task is None:
        return {"call_snippets": []}
    url = snippets.base_url(application.manifest, request.build_absolute_uri("/"))
    return {
        "call_task_title": snippets.TASK_TITLES[task],
        "call_base_url": url,
        "call_snippets": snippets.call_snippets(task, url, application.name),
    }


@require_POST
def rollback(request, name):
    application, deployer = application_to_change(request.membership, name)
    try:
        number = int(request.POST.get("revision", ""))
        applied = verbs.rollback(application, number, deployer)
    except ValueError:
        messages.error(request, "revision: pick a revision number from the deploy history.")
    except verbs.ActionError as error:
        messages.error(request, str(error))
    except verbs.Refused as refused:
        for problem in refused.dry_run.refusals:
            messages.error(request, f"Rollback refused: {problem}")
    else:
        messages.success(
            request, f"Revision {applied.revision.number} rolls {name} back to revision {number}."
        )
    return redirect("jobs:application-detail", name=name)


@require_POST
def deploy(request, name):
    application, deployer = application_to_change(request.membership, name)
    revision = verbs.deploy_latest(application, deployer)
    messages.success(request, f"Revision {revision.number} handed to the cluster backend.")
    return redirect("jobs:application-detail", name=name)


STARTING = "starting: its replicas start again with the same settings."


def _operation(verb: str, done: str):
    @require_POST
    def operate(request, name):
        application, deployer = application_to_change(request.membership, name)
        was_stopped = application.phase == Phase.STOPPED
        try:
            getattr(verbs, verb)(application, deployer)
        except verbs.ActionError as error:
            messages.error(request, str(error))
        else:
            # Restarting a stopped model replaces nothing: it starts.
            messages.success(request, f"{name}: {STARTING if was_stopped else done}")
        return redirect("jobs:application-detail", name=name)

    operate.__name__ = verb
    return operate


def _decision(verb: str, done: str):
    """A Canary rollout's decision by hand (jobs.deploy.promote, abort)."""

    @require_POST
    def decide(request, name):
        application, deployer = application_to_change(request.membership, name)
        try:
            rollout = getattr(verbs, verb)(application, deployer)
        except verbs.ActionError as error:
            messages.error(request, str(error))
        else:
            messages.success(request, f"{name}: revision {rollout.canary_revision} {done}")
        return redirect("jobs:application-detail", name=name)

    decide.__name__ = verb
    return decide


promote = _decision("promote", "is promoted; the old revision stops once it serves every request.")
abort = _decision("abort", "is aborted; the stable revision takes every request.")
restart = _operation("restart", "restarting: new replicas replace the old ones.")
stop = _operation("stop", "stopped; its configuration is kept for Start.")
start = _operation("start", STARTING)


# Delete's typed-name confirmation: the form's field, checked here whatever the browser did.
CONFIRM_FIELD = "confirm_name"


def confirmation_error(typed: str, name: str) -> str | None:
    """What is wrong with the name typed to confirm deleting `name` (None: it is the name)."""
    typed = typed.strip()
    if typed == name:
        return None
    said = "is empty" if not typed else f"is not {name}"
    return (
        f"The name typed to confirm ({CONFIRM_FIELD}) {said}: type {name}, exactly, to delete "
        "it. Nothing was deleted."
    )


@require_POST
def delete(request, name):
    application, deployer = application_to_change(request.membership, name)
    keep_on_cluster = request.POST.get("keep_on_cluster") == "1"
    error = confirmation_error(request.POST.get(CONFIRM_FIELD, ""), application.name)
    if error is not None:
        where = "console_only" if keep_on_cluster else "everywhere"
        return _detail_page(
            request,
            application,
            status=400,
            delete_error={where: error},
            offer_delete_from_console=keep_on_cluster,
        )
    try:
        left = verbs.delete(application, deployer, keep_on_cluster=keep_on_cluster)
    except verbs.ActionError as error:
        messages.error(request, str(error))
        detail_url = reverse("jobs:application-detail", args=[name])
        # The cluster is down: offer the delete that leaves its objects there.
        return redirect(detail_url + ("?delete=unavailable" if error.status == 503 else ""))
    if left:
        messages.warning(request, left)
    elif application.pk is not None:  # Deleting: the cluster removes its objects
        messages.info(request, f"{name} is being deleted: {application.reason}")
    else:
        messages.success(request, f"{name} is deleted, with everything rendered for it.")
    return redirect("console:home")


def example_manifest(membership) -> str:
    """The shortest manifest, on the organisation's first profile: the page's example."""
    profile = Profile.objects.for_member(membership).order_by("name").first()
    return EXAMPLE.format(profile=profile.name if profile else "local")


EXAMPLE = """\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: bge-embed
  profileName: {profile}
  source:
    type: Model
    model:
      uri: hf://BAAI/bge-m3
"""


def _yaml_page(request, membership, context: dict, status: int = 200):
    context = {"example_manifest": example_manifest(membership), **context}
    return render(request, "jobs/deploy_yaml.html", context, status=status)


def deploy_from_yaml(request):
    """Paste a manifest, see the dry run, deploy: the same checks as the API and the CLI."""
    membership = require(request.membership, "deploy", "applications")
    return _yaml_page(request, membership, {"manifest_text": "", "run": None})


@require_POST
def deploy_from_yaml_dry_run(request):
    membership = require(request.membership, "deploy", "applications")
    text = request.POST.get("manifest", "")
    if not text.strip():  # say which field, not "the document is empty"
        if request.htmx:
            return render(request, "jobs/_dry_run.html", {"empty": True})
        return _yaml_page(request, membership, {"manifest_text": text, "empty": True}, 400)
    run = verbs.dry_run(text, membership.organization)
    context = {"manifest_text": text, "run": run}
    if run.manifest and run.ok:
        # Only a manifest that passed is shown; a refused one may hold input-sized bad values,
        # and writing them out as YAML took minutes for a 1 MB scalar.
        context["filled_yaml"] = to_yaml(run.manifest)
    if request.htmx:
        return render(request, "jobs/_dry_run.html", context)
    return _yaml_page(request, membership, context)


@require_POST
def deploy_from_yaml_apply(request):
    deployer = as_deployer(request.membership)  # before the form is read; apply takes it
    membership = deployer.membership
    text = request.POST.get("manifest", "")
    if not text.strip():
        return _yaml_page(request, membership, {"manifest_text": text, "empty": True}, 400)
    try:
        applied = verbs.apply(text, deployer)
    except verbs.Refused as refused:
        context = {"manifest_text": text, "run": refused.dry_run}
        return _yaml_page(request, membership, context, 400)
    except verbs.ActionError as error:
        messages.error(request, str(error))
        context = {"manifest_text": text, "run": None}
        return _yaml_page(request, membership, context, 400)
    messages.success(request, f"{applied.application.name} is saved.")
    return redirect("jobs:application-detail", name=applied.application.name)
