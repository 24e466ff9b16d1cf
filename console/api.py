"""The REST API under /api/v1/: one NinjaAPI, routers from each app, errors in one shape.

Every error is {"error": {"status", "message", "problems": [{path, message, level}]}}
(console/api_errors.py): a refused manifest lists its problems there, anything else says why
in `message`. Routers added here get that shape for every error without doing anything; a route
declares its own error statuses with `console.api_errors.errors(...)`.
"""

import json
from typing import Any

from accesspolicies.api import domains_router, keys_router, me_router, policies_router
from accesspolicies.api_auth import SessionMemberAuth, TokenAuth
from accesspolicies.problems import Invalid
from console.api_errors import ErrorShapedAPI, respond
from jobs.api import router as applications_router
from jobs.deploy import ActionError, Refused
from jobs.usage.api import router as usage_router
from models_catalog.api import router as models_router

api = ErrorShapedAPI(
    title="ServeDeck API",
    version="1",
    description="Serve open-source models on your own clusters. Authenticate with a personal "
    "access token (`Authorization: Bearer <token>`) or the console's session. Every error "
    "answers the `ErrorOut` shape.",
    auth=[TokenAuth(), SessionMemberAuth()],
    urls_namespace="api",
    # Swagger UI from django-ninja's packaged files ("ninja" in INSTALLED_APPS), never a CDN;
    # open like the OpenAPI document it shows (its calls need a token or the session).
    docs_url="/docs",
)
api.add_router("/applications", applications_router)
api.add_router("/models", models_router)
api.add_router("/keys", keys_router)
api.add_router("/policies", policies_router)
api.add_router("/domains", domains_router)
api.add_router("", usage_router)
api.add_router("/me", me_router)


@api.exception_handler(Refused)
def refused(request, error: Refused):
    count = len(error.dry_run.refusals)
    message = (
        f"The manifest was refused: {count} problem{'s' if count != 1 else ''} to fix "
        f"(first: {error.dry_run.refusals[0]}). Each is listed under problems."
        if count
        else "The manifest was refused."
    )
    return respond(api, request, 400, message, error.dry_run.problems())


@api.exception_handler(ActionError)
def action_error(request, error: ActionError):
    return respond(api, request, error.status, str(error), [error.as_dict()])


@api.exception_handler(Invalid)
def invalid(request, error: Invalid):
    return respond(api, request, error.status, str(error), [error.as_dict()])


def as_answered(body: Any) -> Any:
    """`body` as a client of this API reads it (written by the API's own renderer, read back):
    a command that prints an API shape prints what `servedeck` prints from the answer."""
    return json.loads(api.renderer.render(None, body, response_status=200))
