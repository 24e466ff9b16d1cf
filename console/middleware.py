"""The console's request guards: every page needs login (the REST API answers 401 itself
instead of redirecting), probes get /healthz and /readyz first, every response carries the
Content-Security-Policy, and no credential travels in a query string."""

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpResponse, JsonResponse

from accesspolicies.secrets import API_KEY, PERSONAL_TOKEN
from console import health
from console.api_errors import error_body

# Paths that authenticate on their own (tokens) or must be reachable without a session.
OPEN_PREFIXES = ("/api/",)


class LoginRequiredMiddleware(DjangoLoginRequired):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith(OPEN_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class HealthCheckMiddleware:
    """Answer /healthz (alive) and /readyz (the database and Redis answer; 503 naming what does
    not) before host checks and the HTTPS redirect: probes come from any address."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/healthz":
            return HttpResponse("ok", content_type="text/plain")
        if request.path == "/readyz":
            problems = health.readiness_problems()
            if problems:
                return HttpResponse("; ".join(problems), content_type="text/plain", status=503)
            return HttpResponse("ready", content_type="text/plain")
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Send settings.CONTENT_SECURITY_POLICY on every response that has none: scripts and styles
    from this site's files only, so markup injected into a page cannot run."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response


# Query parameters that would put a credential into URLs (and so into access logs, browser
# history and Referer headers); tokens go in the Authorization header only.
CREDENTIAL_PARAMETERS = frozenset(
    {"token", "access_token", "api_key", "apikey", "key", "password", "secret", "bearer", "auth"}
)
TOKEN_PREFIXES = (PERSONAL_TOKEN.prefix, API_KEY.prefix)


class QueryStringCredentialsMiddleware:
    """Refuse a request whose query string carries a credential, before anything acts on it;
    the access log keeps no query values either (console.serve)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        for name, values in request.GET.lists():
            if name.lower() in CREDENTIAL_PARAMETERS or any(
                value.startswith(TOKEN_PREFIXES) for value in values
            ):
                return self._refuse(request, name)
        return self.get_response(request)

    def _refuse(self, request, name: str) -> HttpResponse:
        message = (
            f"The query parameter {name[:40]!r} carries a credential, and URLs are written to "
            "logs: send tokens only as 'Authorization: Bearer <token>'. If this was a real "
            "token, revoke it under Team and create another."
        )
        if request.path.startswith(OPEN_PREFIXES):
            return JsonResponse(error_body(400, message), status=400)
        return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
