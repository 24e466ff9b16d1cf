"""The shell: the home dashboard and switching organisation."""

from django.core.paginator import EmptyPage, PageNotAnInteger
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from accesspolicies.access import ORG_SESSION_KEY, membership_for
from jobs.tables import ApplicationTable, applications_for_table


@require_safe
def home(request):
    table = ApplicationTable(applications_for_table(request.membership), request=request)
    _paginate(table, request.GET.get("page", 1), per_page=50)
    template = "console/_applications.html" if request.htmx else "console/home.html"
    return render(request, template, {"table": table})


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
