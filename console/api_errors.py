"""The REST API's one error shape, the handlers that produce it, and its place in OpenAPI.

Every error the API answers, from a refused manifest to a 500, is

    {"error": {"status": 409, "message": "...", "problems": [{"path", "message", "level"}]}}

`message` is one sentence a person reads; `problems` lists what a client can point at (the
manifest's refusals and warnings, the request fields that did not validate), empty when there
is nothing to point at. `install(api)` puts the handlers on a NinjaAPI, so every router added
to it answers errors this way without doing anything.

A route declares the statuses it answers beyond the common ones with `errors(...)`:

    @router.post("", response={201: ItemOut, **errors(400, 409)})

The common ones (COMMON_ERRORS, plus 404 on a path with parameters and 413 on a method with a
body) are added to every operation of the OpenAPI document by `ErrorShapedAPI`.
"""

import logging
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import IntegrityError
from django.http import Http404
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError

logger = logging.getLogger(__name__)

# Every operation can answer these: no credentials, a role or CSRF refusal, a query or body
# field of the wrong type, and a fault of the server.
COMMON_ERRORS = (401, 403, 422, 500)
BODY_METHODS = {"post", "put", "patch"}
MAX_PROBLEMS = 100  # never send back an unbounded list, whatever the input


class ProblemOut(Schema):
    path: str
    message: str
    level: str
    origin: str | None = None  # schema, rule, check-model or target (a verb's own: none)


class ErrorDetail(Schema):
    status: int
    message: str
    problems: list[ProblemOut]


class ErrorOut(Schema):
    error: ErrorDetail


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The `response=` entries of a route's error statuses, all in the one error shape."""
    return dict.fromkeys(statuses, ErrorOut)


def error_body(status: int, message: str, problems: list[dict] | None = None) -> dict:
    return {
        "error": {
            "status": status,
            "message": message,
            "problems": list(problems or [])[:MAX_PROBLEMS],
        }
    }


def respond(api: NinjaAPI, request, status: int, message: str, problems=None):
    """An error response in the one shape (for handlers and views that answer an error)."""
    return api.create_response(request, error_body(status, message, problems), status=status)


UNAUTHENTICATED = (
    "Not authenticated: send a personal access token as 'Authorization: Bearer <token>' "
    "(create one under Team), or log in."
)
TOO_BIG = (
    "The request body is larger than the {limit} bytes the API accepts; send a smaller "
    "manifest (a manifest is a few kilobytes)."
)
CONFLICT = (
    "The request conflicts with an object saved at the same time (another request created or "
    "changed it); read it again and retry."
)
SERVER_FAULT = (
    "The server failed while answering this request; nothing of the request is shown here. "
    "Try again; if it persists, report it to the operator with the time of the request."
)


def _field_problems(validation: ValidationError) -> list[dict]:
    """The framework's 422 list as problems: where (query.limit, body.revision) and what."""
    problems = []
    for item in validation.errors[:MAX_PROBLEMS]:
        location = ".".join(str(part) for part in item.get("loc", ()))
        problems.append(
            {"path": location, "message": str(item.get("msg", "invalid"))[:300], "level": "refusal"}
        )
    return problems


def install(api: NinjaAPI) -> None:
    """Answer every error `api` meets in the one shape. Handlers for more specific errors
    (a verb's own refusal) may be added after this; the most specific class wins."""

    @api.exception_handler(ValidationError)
    def invalid(request, error: ValidationError):
        problems = _field_problems(error)
        fields = ", ".join(p["path"] for p in problems[:5])
        return respond(api, request, 422, f"Some request fields are not valid: {fields}.", problems)

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request, error):
        return respond(api, request, 401, UNAUTHENTICATED)

    @api.exception_handler(HttpError)
    def http_error(request, error: HttpError):
        return respond(api, request, error.status_code, str(error))

    @api.exception_handler(Http404)
    def not_found(request, error):
        return respond(api, request, 404, str(error) or "Not found.")

    @api.exception_handler(PermissionDenied)
    def forbidden(request, error):
        return respond(api, request, 403, str(error) or "Not allowed.")

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, error):
        return respond(api, request, 413, too_big_message())

    @api.exception_handler(IntegrityError)
    def conflict(request, error):
        return respond(api, request, 409, CONFLICT)

    @api.exception_handler(Exception)
    def server_fault(request, error):
        # The traceback goes to the server's log, never to the client.
        logger.exception("API request failed: %s %s", request.method, request.path[:200])
        return respond(api, request, 500, SERVER_FAULT)


def too_big_message() -> str:
    from django.conf import settings

    return TOO_BIG.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _error_response(status: int) -> dict:
    return {
        "description": _phrase(status),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    }


def declare_common_errors(schema: dict) -> dict:
    """Add the statuses every operation can answer to each operation of an OpenAPI document,
    and the error shape's schema to its components."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    shape = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(shape.pop("$defs", {}))
    components["ErrorOut"] = shape
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            statuses = list(COMMON_ERRORS)
            if "{" in path:
                statuses.append(404)
            if method in BODY_METHODS:
                statuses.append(413)
            responses = operation.setdefault("responses", {})
            for status in statuses:
                responses.setdefault(status, _error_response(status))
    return schema


class ErrorShapedAPI(NinjaAPI):
    """A NinjaAPI whose errors all have the one shape, declared in its OpenAPI document."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install(self)

    def get_openapi_schema(self, *args: Any, **kwargs: Any):
        return declare_common_errors(super().get_openapi_schema(*args, **kwargs))


API_PREFIX = "/api/"
OUTSIDE_THE_API = {
    404: "There is no API route at this address; /api/v1/openapi.json lists every route.",
    405: "This route does not answer {method}; it answers {allowed}.",
    400: "The request could not be read.",
}


class ApiErrorShapeMiddleware:
    """Errors answered before the API's own handlers run (no route matched, a method the route
    does not have, a body too big for Django to read) get the same JSON shape under /api/."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            not request.path.startswith(API_PREFIX)
            or response.status_code < 400
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        return self._shaped(request, response)

    def _shaped(self, request, response):
        from django.conf import settings
        from django.http import JsonResponse

        status = response.status_code
        if status == 400 and _declared_length(request) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            status, message = 413, too_big_message()
        elif status in OUTSIDE_THE_API:
            allowed = response.get("Allow", "") or "none"
            message = OUTSIDE_THE_API[status].format(method=request.method[:10], allowed=allowed)
        elif status >= 500:
            message = SERVER_FAULT
        else:
            message = _phrase(status) + "."
        shaped = JsonResponse(error_body(status, message), status=status)
        if "Allow" in response:
            shaped["Allow"] = response["Allow"]
        return shaped


def _declared_length(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
