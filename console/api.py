"""The REST API under /api/v1/: one NinjaAPI, routers from each app, errors in one shape.

Every error is a JSON body: manifest problems as a list of {path, message, level}, anything
else as {"detail": message}.
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError

from accesspolicies.api_auth import SessionMemberAuth, TokenAuth
from jobs.api import router as applications_router
from jobs.api_usage import router as usage_router
from jobs.deploy import ActionError, Refused
from models_catalog.api import router as models_router

api = NinjaAPI(
    title="ServeDeck API",
    version="1",
    description="Serve open-source models on your own clusters. Authenticate with a personal "
    "access token (`Authorization: Bearer <token>`) or the console's session.",
    auth=[TokenAuth(), SessionMemberAuth()],
    urls_namespace="api",
    docs_url=None,
)
api.add_router("/applications", applications_router)
api.add_router("/models", models_router)
api.add_router("", usage_router)


@api.exception_handler(Refused)
def refused(request, error: Refused):
    return api.create_response(request, error.dry_run.problems(), status=400)


@api.exception_handler(ActionError)
def action_error(request, error: ActionError):
    return api.create_response(request, [error.as_dict()], status=error.status)


@api.exception_handler(Http404)
def not_found(request, error):
    return api.create_response(request, {"detail": str(error) or "Not found."}, status=404)


@api.exception_handler(PermissionDenied)
def forbidden(request, error):
    return api.create_response(request, {"detail": str(error) or "Not allowed."}, status=403)


@api.exception_handler(AuthenticationError)
def unauthenticated(request, error):
    return api.create_response(
        request,
        {
            "detail": "Not authenticated: send a personal access token as "
            "'Authorization: Bearer <token>' (create one under Access), or log in."
        },
        status=401,
    )
