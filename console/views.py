"""The shell: the home dashboard, switching organisation, the 404 page and the favicon."""

from django.contrib.auth.decorators import login_not_required
from django.core.paginator import EmptyPage, PageNotAnInteger
from django.http import Http404
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.http import require_POST, require_safe

from accesspolicies.access import ORG_SESSION_KEY, membership_for
from jobs.tables import ApplicationTable, applications_for_table
from jobs.wizard.first_models import first_models_panel


@require_safe
def home(request):
    table = ApplicationTable(applications_for_table(request.membership), request=request)
    _paginate(table, request.GET.get("page", 1), per_page=50)
    table.add_sparklines()
    if request.htmx:
        return render(request, "console/_applications.html", {"table": table})
    # Nothing deployed yet: small models to start with (and, offline, how to serve a folder).
    empty = table.paginator.count == 0
    first = first_models_panel(request.membership) if empty else None
    return render(request, "console/home.html", {"table": table, "first_models": first})


def _paginate(table, page, per_page: int) -> None:
    """Paginate; a page that is not a number shows the first, one past either end the nearest
    (an old link after deletions, a hand-typed ?page=)."""
    try:
        table.paginate(page=page, per_page=per_page)
    except PageNotAnInteger:
        table.page = table.paginator.page(1)
    except EmptyPage:
        below = int(page) < 1  # validate_number has shown that it is a whole number
        table.page = table.paginator.page(1 if below else table.paginator.num_pages)


@require_POST
def switch_organization(request):
    slug = request.POST.get("organization", "")
    membership = membership_for(request.user, slug)
    if membership is None or membership.organization.slug != slug:
        raise Http404(f"You are not a member of an organisation called {slug!r}.")
    request.session[ORG_SESSION_KEY] = slug
    return redirect("console:home")


def page_not_found(request, exception):
    """The 404 page: the same plain words whatever was not found. The exception is never
    shown: its text can hold what was typed, and its class name (Resolver404) means nothing
    to a user."""
    return render(request, "404.html", status=404)


@login_not_required
@require_safe
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says."""
    return redirect(static("console/favicon.svg"), permanent=True)
