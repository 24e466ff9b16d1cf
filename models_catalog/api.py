"""REST endpoints for the models catalog: search the Hub, and Check model."""

from datetime import datetime

from django.core.exceptions import PermissionDenied
from ninja import Router, Schema
from ninja.errors import HttpError

from accesspolicies.access import require
from console.api_errors import errors
from jobs.access import ProfileNeeded, profile_or_only
from jobs.dry_run import check_for_profile
from jobs.token_refs import profile_token
from models_catalog import hub

router = Router(tags=["models"])


class HubModelOut(Schema):
    id: str
    downloads: int | None
    likes: int | None
    pipelineTag: str | None
    gated: str | bool | None
    lastModified: datetime | None


@router.get(
    "/search",
    response={200: list[HubModelOut], **errors(400, 404, 502)},
    summary="Search Hugging Face models (for autocomplete)",
)
def search(request, q: str, limit: int = 20, profile: str | None = None):
    membership = require(request.auth, "view", "models")
    token = profile_token(_profile(membership, profile)) if profile else None
    try:
        found = hub.search(q, limit=max(1, min(limit, 50)), token=token)
    except hub.HubError as error:
        raise HttpError(502, f"The Hugging Face Hub did not answer the search: {error}") from None
    return [
        {
            "id": m.id,
            "downloads": m.downloads,
            "likes": m.likes,
            "pipelineTag": m.pipeline_tag,
            "gated": m.gated,
            "lastModified": m.last_modified,
        }
        for m in found
    ]


def _profile(membership, name: str | None):
    try:
        return profile_or_only(membership, name)
    except ProfileNeeded as needed:
        raise HttpError(400, str(needed)) from None


@router.get(
    "/check",
    response={200: dict, **errors(400, 404)},
    summary="Check model: can the platform serve it, and on what",
)
def check(
    request,
    uri: str,
    profile: str | None = None,
    context: int | None = None,
    concurrency: int = 1,
    format: str | None = None,  # noqa: A002 (the manifest's field name)
):
    membership = request.auth
    if not membership:
        raise PermissionDenied("Log in, or send a personal access token.")
    chosen = _profile(membership, profile)
    result = check_for_profile(
        uri, chosen, context_tokens=context, concurrency=max(1, concurrency), format=format
    )
    return {"profile": chosen.name, **result.as_dict()}
