"""Attach the member the request acts as (`request.membership`), looked up only when used, and
the request's address for the audit log."""

from django.utils.functional import SimpleLazyObject

from accesspolicies import audit
from accesspolicies.access import current_membership


class MembershipMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.membership = SimpleLazyObject(lambda: current_membership(request))
        with audit.request_origin(request):
            return self.get_response(request)
