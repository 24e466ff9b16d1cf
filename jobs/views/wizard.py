"""Deploy model, the wizard: one view per step. GET shows the step; POST saves its inputs into
the member's draft and goes Back or Next. An htmx request gets the step's fragment (and the
step's URL pushed), a browser the whole page; the verbs live in jobs.wizard.flow."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url

from jobs import deploy as verbs
from jobs.access import as_deployer, get_application
from jobs.wizard import drafts, flow, present, steps
from jobs.wizard.fields import LABELS, STEP_INPUTS
from jobs.wizard.paths import MODEL, get
from models_catalog import hub

PAGE = "jobs/wizard/page.html"


def _fragment(request: HttpRequest) -> bool:
    """htmx asked for a part of the page (a history restore wants the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def _show(request: HttpRequest, slug: str, context: dict, status: int = 200) -> HttpResponse:
    template = f"jobs/wizard/{slug}.html"
    if _fragment(request):  # htmx swaps only 2xx answers: problems come back as 200
        response = render(request, template, context | {"fragment": True})
    else:
        response = render(request, PAGE, context | {"step_template": template}, status=status)
    # A step shows the draft as saved now: never from a cache (the back-forward cache
    # included), and a fragment is never taken for the page.
    add_never_cache_headers(response)
    patch_vary_headers(response, ["HX-Request", "HX-History-Restore-Request"])
    return response


def _context(request: HttpRequest, state: flow.State, slug: str) -> dict:
    if slug == "model":
        return present.model_context(
            request.membership,
            state,
            commit=_commit(request, state),
            suggested=_suggested(request, state),
        )
    return {
        "check": present.check_context,
        "compute": present.compute_context,
        "access": present.access_context,
        "api": present.api_context,
        "review": present.review_context,
    }[slug](state)


def _commit(request: HttpRequest, state: flow.State) -> str | None:
    """The Hub's current commit of the draft's hf:// model, offered for pinning."""
    uri = get(state.draft.manifest, f"{MODEL}.uri")
    if not isinstance(uri, str) or not uri.startswith("hf://"):
        return None
    repo = uri[len("hf://") :].split(":", 1)[0]
    profile = get(state.draft.manifest, "spec.profileName")
    return flow.current_commit(request.membership, repo, profile) if repo else None


def _suggested(request: HttpRequest, state: flow.State | None) -> str:
    """A free name from the model picked, offered while the draft has no name."""
    if state is None or get(state.draft.manifest, "spec.name"):
        return ""
    uri = get(state.draft.manifest, f"{MODEL}.uri")
    repo = uri[len("hf://") :] if isinstance(uri, str) and uri.startswith("hf://") else ""
    return flow.suggested_name(request.membership.organization, repo, state.draft)


def _go(request: HttpRequest, state: flow.State, slug: str) -> HttpResponse:
    """Show step `slug`: htmx swaps it in and pushes its URL; a browser is redirected to it."""
    url = present.step_url(state.draft, slug)
    if not _fragment(request):
        return redirect(url)
    return push_url(_show(request, slug, _context(request, state, slug)), url)


def _shows_review(request: HttpRequest, slug: str) -> bool:
    """This POST's answer may be Review (which shows the cluster's server-side dry run): its
    fragment after the last step before it, or Review itself."""
    if slug == steps.LAST:
        return True
    going_on = request.POST.get("go") != "back"
    return _fragment(request) and going_on and steps.following(slug) == steps.LAST


def _after_save(request: HttpRequest, state: flow.State, slug: str) -> HttpResponse:
    """Back goes back whatever the inputs; Next goes on only when this step and every step
    before it has no refusal pending, else the step that has one shows it beside its field."""
    if request.POST.get("go") == "back":
        back = steps.previous(slug)
        return _go(request, state, back) if back else redirect("console:home")
    blocked = state.blocked
    if blocked is not None and steps.index(blocked) <= steps.index(slug):
        if blocked != slug:
            return _go(request, state, blocked)
        return _show(request, slug, _context(request, state, slug), status=400)
    return _go(request, state, steps.following(slug) or slug)


STARTED = "wizard-started"  # session: each new-draft form's token -> the draft it made
STARTED_KEPT = 20


@require_http_methods(["GET", "POST"])
def start(request: HttpRequest) -> HttpResponse:
    """Deploy model: the Model step of a new draft, with the member's drafts to resume. The
    draft is made once the Model step is valid; the same form posted again (Back to a page
    the browser kept) goes on with the draft it made, never a second one."""
    membership = request.membership
    drafts.drafts_of(membership)  # the role check
    if request.method == "GET":
        context = present.model_context(
            membership, None, drafts=drafts.listed(membership), offered=_offered(request)
        )
        return _show(request, "model", context | _start_extra(secrets.token_urlsafe(12)))
    token = request.POST.get("start", "")
    made = request.session.get(STARTED, {}).get(token) if token else None
    draft = drafts.started_draft(membership, made) if made else None
    if draft is not None:
        return _post_step(request, draft, "model")
    state = flow.start(membership, request.POST)
    if state.draft.pk is None:  # refused: shown, and nothing saved
        context = _context(request, state, "model") | _start_extra(token)
        return _show(request, "model", context, status=400)
    if token:
        started = dict(request.session.get(STARTED, {}))
        started[token] = state.draft.key
        request.session[STARTED] = dict(list(started.items())[-STARTED_KEPT:])
    response = _after_save(request, state, "model")
    # Back from the next step is the draft's Model step: wizard.js puts it in place of
    # /deploy/ in the history.
    response["X-Wizard-Draft"] = present.step_url(state.draft, "model")
    return response


def _offered(request: HttpRequest) -> dict[str, str]:
    """A model offered by a link (Check model's "Deploy this model": /deploy/?uri=org/name
    &profile=...&context=...): the Model step starts filled in, with a free name."""
    offered = present.prefilled(request.GET)
    if offered.get("repo") and not offered.get("name"):
        name = flow.suggested_name(request.membership.organization, offered["repo"])
        offered |= {"name": name} if name else {}
    return offered


def _start_extra(token: str) -> dict:
    return {"start_token": token, "draft_days": drafts.expiry_days()}


def _post_step(request: HttpRequest, draft, slug: str) -> HttpResponse:
    """Save what the step's form changed (and only that), then Back or Next; a form shown
    before the draft last changed that would overwrite a newer value is shown again with the
    values saved now, and nothing is written."""
    server_side = _shows_review(request, slug)
    edits = flow.posted_edits(draft, slug, request.POST) if slug in STEP_INPUTS else None
    if edits is not None and edits.conflicts:
        state = flow.look(draft)
        labels = [LABELS.get(name, name) for name in edits.conflicts]
        context = _context(request, state, slug) | {"conflicts": labels}
        return _show(request, slug, context, status=409)
    if slug == "model":
        state = flow.save_model(draft, edits.data)
    elif slug in ("compute", "access", "api"):
        state = flow.save_step(draft, slug, edits.data, server_side=server_side)
    else:  # Check model and Review have nothing to save
        state = flow.look(draft, server_side=server_side)
    return _after_save(request, state, slug)


def _step(slug: str) -> Callable[[HttpRequest, str], HttpResponse]:
    @require_http_methods(["GET", "POST"])
    def step(request: HttpRequest, key: str) -> HttpResponse:
        draft = drafts.get_draft(request.membership, key)
        if request.method == "POST":
            return _post_step(request, draft, slug)
        state = flow.look(draft, server_side=slug == steps.LAST)
        if not state.reachable(slug):  # a refusal pending earlier: show it there
            return _go(request, state, state.blocked)
        return _show(request, slug, _context(request, state, slug))

    step.__name__ = f"{slug}_step"
    return step


model_step = _step("model")
check_step = _step("check")
compute_step = _step("compute")
access_step = _step("access")
api_step = _step("api")
review_step = _step("review")


@require_GET
def resume(request: HttpRequest, key: str) -> HttpResponse:
    """A draft opens at the first step with something to fix, else at Review."""
    state = flow.look(drafts.get_draft(request.membership, key))
    return redirect(present.step_url(state.draft, state.blocked or steps.LAST))


@require_POST
def discard(request: HttpRequest, key: str) -> HttpResponse:
    draft = drafts.get_draft(request.membership, key)
    what = draft.name or "untitled"
    draft.delete()
    messages.success(request, f"The draft {what} is discarded.")
    return redirect("jobs:wizard")


@require_POST
def discard_all(request: HttpRequest) -> HttpResponse:
    """Discard every draft of the member's (Deploy model asks first)."""
    count = drafts.discard_all(request.membership)
    messages.success(request, f"{count} draft{'s' if count != 1 else ''} discarded.")
    return redirect("jobs:wizard")


@require_http_methods(["GET", "POST"])
def edit(request: HttpRequest, name: str) -> HttpResponse:
    """Change a deployed model through the same steps: its manifest becomes the draft (on POST;
    a GET, from an old link, only offers the button)."""
    application = get_application(request.membership, name, "deploy")
    if request.method == "GET":
        return render(request, "jobs/wizard/edit_start.html", {"application": application})
    draft = drafts.edit_draft(request.membership, application)
    return redirect(present.step_url(draft, steps.FIRST))


@require_POST
def deploy(request: HttpRequest, key: str) -> HttpResponse:
    """Apply what Review showed; then the model's page, where its phase shows."""
    deployer = as_deployer(request.membership)  # the request's one deploy decision
    draft = drafts.get_draft(deployer, key)
    try:
        applied = flow.deploy(draft, deployer, request.POST.get("reviewed", ""))
    except flow.Blocked as blocked:
        return _go(request, blocked.state, blocked.state.blocked)
    except flow.Stale as stale:
        context = present.review_context(stale.state) | {"stale": True}
        return _show(request, "review", context, status=409)
    except (verbs.Refused, verbs.ActionError) as error:
        state = flow.look(draft, server_side=True)
        context = present.review_context(state) | {"deploy_error": error}
        return _show(request, "review", context, status=400)
    name = applied.application.name
    if applied.revision is None:
        messages.info(request, f"Nothing changed: {name} runs this manifest already.")
    elif applied.created:
        messages.success(request, f"{name} is deployed: revision 1 is handed to its cluster.")
    else:
        messages.success(request, f"Revision {applied.revision.number} of {name} is deployed.")
    url = reverse("jobs:application-detail", kwargs={"name": name})
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_GET
def download(request: HttpRequest, key: str) -> HttpResponse:
    """The filled-in manifest Review shows, as a file."""
    state = flow.look(drafts.get_draft(request.membership, key))
    response = HttpResponse(present.yaml_text(state.manifest), content_type="application/yaml")
    filename = f"{download_name(get(state.manifest, 'spec.name'))}.yaml"
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def download_name(name: object) -> str:
    """A file name from a draft's name, whatever was typed: quotes, CR/LF, slashes and anything
    outside [A-Za-z0-9._-] become '-', at most 100 characters."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name if isinstance(name, str) else "")
    return safe[:100].strip("-.") or "application"


@require_GET
def name_status(request: HttpRequest) -> HttpResponse:
    """The name as it is typed: the manifest's rules for it, and whether a model has it."""
    key = request.GET.get("draft")
    draft = drafts.get_draft(request.membership, key) if key else None
    drafts.drafts_of(request.membership)  # the role check for a new draft
    name = request.GET.get("name", "").strip()
    problems = flow.name_problems(request.membership, draft, name, request.GET.get("profile", ""))
    context = {"name": name, "name_problems": problems}
    return render(request, "jobs/wizard/_name_status.html", context)


@require_GET
def hub_search(request: HttpRequest) -> HttpResponse:
    """The Hugging Face autocomplete: models whose id holds what is typed."""
    drafts.drafts_of(request.membership)  # deployers only
    query = request.GET.get("repo", "").strip()
    context: dict = {"query": query, "models": [], "error": None}
    try:
        found = flow.search_hub(request.membership, query, request.GET.get("profile"))
    except hub.HubError as error:
        context["error"] = str(error)
    else:
        context["models"] = [present.hub_model(m) for m in found]
    return render(request, "jobs/wizard/_hub_results.html", context)


@require_GET
def hub_pick(request: HttpRequest) -> HttpResponse:
    """A model picked from the list: its repository, pinned to the Hub's current commit."""
    drafts.drafts_of(request.membership)
    repo = request.GET.get("repo", "").strip()
    commit = flow.current_commit(request.membership, repo, request.GET.get("profile"))
    key = request.GET.get("draft")
    draft = drafts.get_draft(request.membership, key) if key else None
    context = {
        "suggested_name": flow.suggested_name(request.membership.organization, repo, draft),
        "values": {"repo": repo, "revision": commit or ""},
        "commit": None,
        "picked": True,
        "errors": {},
        "cautions": {},
        "locks": {},
    }
    return render(request, "jobs/wizard/_hub_source.html", context)


@require_GET
def compute_memory(request: HttpRequest, key: str) -> HttpResponse:
    """Compute's GPU tiles and memory needed for the context being typed (saves nothing)."""
    draft = drafts.get_draft(request.membership, key)
    check = flow.memory_at(draft, request.GET)
    return render(
        request, "jobs/wizard/_sizing.html", present.sizing_context(draft, check, request.GET)
    )
