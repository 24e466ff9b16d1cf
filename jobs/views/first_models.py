"""The dashboard's first models: one click deploys one (POST only; the cards are on the
dashboard, console.views.home)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from jobs import deploy as verbs
from jobs.wizard.first_models import UnknownFirstModel, deploy_first_model


@require_POST
def deploy(request: HttpRequest, key: str) -> HttpResponse:
    """Deploy a first model under a free name, then its page; a refusal goes back to the
    dashboard with every reason (a missing runtime's names the command that installs it)."""
    try:
        applied = deploy_first_model(request.membership, key)
    except UnknownFirstModel:
        raise Http404("No first model has that name; pick one on the Models page.") from None
    except verbs.Refused as refused:
        reasons = " ".join(p.message for p in refused.dry_run.refusals)
        messages.error(request, f"The model was not deployed: {reasons}")
        return redirect("console:home")
    except verbs.ActionError as error:
        messages.error(request, f"The model was not deployed: {error.message}")
        return redirect("console:home")
    name = applied.application.name
    messages.success(request, f"{name} is deployed: revision 1 is handed to its cluster.")
    return redirect("jobs:application-detail", name=name)
