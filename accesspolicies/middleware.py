"""Attach the member a request acts as (`request.membership`), looked up only when used, and
the request's address for the audit log; refuse a page's form that was opened for another
organisation than the session's."""

from django.shortcuts import render
from django.utils.functional import SimpleLazyObject

from accesspolicies import audit
from accesspolicies.access import current_membership

# Every page form carries the organisation it was rendered for ({% page_organization %} next to
# {% csrf_token %}); htmx requests carry it as a header set on <body> in base.html.
PAGE_ORGANIZATION_FIELD = "page_organization"
PAGE_ORGANIZATION_HEADER = "X-Page-Organization"
MISMATCH_HEADER = "X-Organization-Mismatch"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")
# Not acting in an organisation: the API (its callers name it by token), the login pages, and
# choosing an organisation itself.
EXEMPT_PREFIXES = (
    "/api/",
    "/login/",
    "/logout/",
    "/organization/switch/",
    "/password/",
    "/access/join/",  # joining an organisation is acting outside the session's one
)


class MembershipMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.membership = SimpleLazyObject(lambda: current_membership(request))
        with audit.request_origin(request):
            return self.get_response(request)


def page_organization(request) -> str:
    """The organisation the submitting page was opened for, as it sent it ('' if it did not)."""
    sent = request.headers.get(PAGE_ORGANIZATION_HEADER) or request.POST.get(
        PAGE_ORGANIZATION_FIELD, ""
    )
    return sent[:100]


class OrganizationGuardMiddleware:
    """URLs carry no organisation, so a state-changing page request must say which one its page
    was opened for; a page left open across a switch in another tab is refused, not applied to
    the organisation switched to."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method in SAFE_METHODS or not request.user.is_authenticated:
            return None
        if request.path.startswith(EXEMPT_PREFIXES):
            return None
        sent = page_organization(request)
        membership = request.membership or None
        current = membership.organization if membership else None
        if current is not None and sent == current.slug:
            return None
        context = {"sent": sent, "current": current, "fragment": bool(request.htmx)}
        response = render(request, "409_organization.html", context, status=409)
        response[MISMATCH_HEADER] = "1"
        return response
