"""Models catalog pages: Check model, and model masters (list, add, edit, delete, from the
recommended set or a vLLM recipe)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accesspolicies.access import require
from jobs.dry_run import check_for_profile
from jobs.machine_catalog import default_machine_catalog, gpu_kinds
from jobs.manifest import FORMATS
from jobs.models import Profile
from jobs.wizard.fields import typed_uri
from models_catalog.access import get_master
from models_catalog.forms import ModelMasterForm, RecipeForm
from models_catalog.models import ModelMaster
from models_catalog.recipes import RecipeError, master_from_recipe
from models_catalog.recommended import BY_MODEL_ID
from models_catalog.tables import ModelMasterTable

WHAT = "model masters"


def masters(request):
    membership = request.membership
    own = ModelMaster.objects.for_member(membership)
    taken = set(own.values_list("model_id", flat=True))
    context = {
        "table": ModelMasterTable(own, request=request),
        "recommended": [entry for entry in BY_MODEL_ID.values() if entry["model_id"] not in taken],
        "may_edit": membership.may("deploy"),
    }
    template = (
        "models_catalog/_masters_table.html" if request.htmx else "models_catalog/masters.html"
    )
    return render(request, template, context)


def _edit(request, instance):
    membership = require(request.membership, "deploy", WHAT)
    form = ModelMasterForm(
        request.POST or None, instance=instance, organization=membership.organization
    )
    if request.method == "POST" and form.is_valid():
        master = form.save()
        messages.success(request, f"The model master for {master.model_id} is saved.")
        return redirect("models_catalog:masters")
    return render(
        request, "models_catalog/master_form.html", {"form": form, "creating": instance is None}
    )


def master_add(request):
    return _edit(request, None)


def master_edit(request, slug):
    return _edit(request, get_master(request.membership, slug, "deploy"))


@require_POST
def master_delete(request, slug):
    master = get_master(request.membership, slug, "deploy")
    master.delete()
    messages.success(request, f"The model master for {master.model_id} is deleted.")
    return redirect("models_catalog:masters")


@require_POST
def master_from_recommended(request):
    membership = require(request.membership, "deploy", WHAT)
    entry = BY_MODEL_ID.get(request.POST.get("model_id", ""))
    if entry is None:
        raise Http404("ServeDeck has no recommended parameters for that model.")
    master, created = ModelMaster.objects.get_or_create(
        organization=membership.organization,
        model_id=entry["model_id"],
        defaults={**entry, "source": ModelMaster.Source.RECOMMENDED},
    )
    if created:
        messages.success(request, f"{master.model_id} now has a model master; adjust it if needed.")
    return redirect("models_catalog:master-edit", slug=master.slug)


def _catalog(membership) -> list[dict]:
    """Every GPU kind the organisation's profiles offer, once each."""
    kinds = {}
    for profile in Profile.objects.for_member(membership):
        for kind in gpu_kinds(profile.machine_catalog):
            kinds.setdefault(kind["name"], kind)
    return list(kinds.values()) or default_machine_catalog()


def master_from_recipe_view(request):
    membership = require(request.membership, "deploy", WHAT)
    form = RecipeForm(request.POST or None, request.FILES or None, catalog=_catalog(membership))
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            draft = master_from_recipe(
                data["recipe"], data["variant"], form.catalog[data["gpu_kind"]]
            )
        except RecipeError as error:
            for problem in error.problems:
                form.add_error(None, problem)
        else:
            fields = draft.fields
            if (
                ModelMaster.objects.for_member(membership)
                .filter(model_id=fields["model_id"])
                .exists()
            ):
                form.add_error(
                    None,
                    f"{fields['model_id']} has a model master already; edit it, or delete it "
                    "first.",
                )
            else:
                master = ModelMaster.objects.create(organization=membership.organization, **fields)
                messages.success(request, " ".join(draft.notes))
                return redirect("models_catalog:master-edit", slug=master.slug)
    return render(request, "models_catalog/recipe_form.html", {"form": form})


def check(request):
    """Check model outside the wizard: paste a URI, see whether and how it would serve."""
    membership = require(request.membership, "view", "models")
    profiles = Profile.objects.for_member(membership)
    typed = request.GET.get("uri", "").strip()
    uri = typed_uri(typed) if typed else ""  # org/name as the wizard's Model step takes it
    context = {
        "profiles": profiles,
        "uri": typed,
        "checked_uri": uri,
        "result": None,
        "errors": [],
        "formats": FORMATS,
        "may_deploy": membership.may("deploy"),
        "may_admin": membership.may("admin"),
    }
    if uri:
        chosen = profiles.filter(name=request.GET.get("profile", "")).first() or profiles.first()
        context["profile"] = chosen
        tokens = request.GET.get("context", "").strip()
        if tokens and not tokens.isdigit():
            context["errors"].append(f"Context length: {tokens!r} is not a whole number of tokens.")
        elif chosen is None:
            context["errors"].append("Profile: this organisation has none yet; add one first.")
        else:
            context["context_tokens"] = int(tokens) if tokens else None
            context["format"] = request.GET.get("format") or ""
            context["result"] = check_for_profile(
                uri,
                chosen,
                context_tokens=context["context_tokens"],
                format=context["format"] or None,
            )
    template = "models_catalog/_check_result.html" if request.htmx else "models_catalog/check.html"
    return render(request, template, context)
