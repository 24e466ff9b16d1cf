"""Every console page needs login; the REST API answers 401 itself instead of redirecting."""

from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpResponse

# Paths that authenticate on their own (tokens) or must be reachable without a session.
OPEN_PREFIXES = ("/api/",)


class LoginRequiredMiddleware(DjangoLoginRequired):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith(OPEN_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class HealthCheckMiddleware:
    """Answer /healthz before host checks and the HTTPS redirect: probes come from any address."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/healthz":
            return HttpResponse("ok", content_type="text/plain")
        return self.get_response(request)
