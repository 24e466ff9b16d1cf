"""The shell: the home dashboard and switching organisation."""

from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accesspolicies.access import ORG_SESSION_KEY, membership_for, require
from jobs.tables import ApplicationTable, applications_for_table


def home(request):
    membership = require(request.membership, "view", "applications")
    table = ApplicationTable(applications_for_table(membership.organization), request=request)
    table.paginate(page=request.GET.get("page", 1), per_page=50)
    template = "console/_applications.html" if request.htmx else "console/home.html"
    return render(request, template, {"table": table})


@require_POST
def switch_organization(request):
    slug = request.POST.get("organization", "")
    membership = membership_for(request.user, slug)
    if membership is None or membership.organization.slug != slug:
        raise Http404(f"You are not a member of an organisation called {slug!r}.")
    request.session[ORG_SESSION_KEY] = slug
    return redirect("console:home")
