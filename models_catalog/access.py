"""The access helper for model masters: in the member's organisation or 404; role or 403."""

from django.http import Http404

from accesspolicies.access import require
from models_catalog.models import ModelMaster


def get_master(membership, slug: str, action: str = "view") -> ModelMaster:
    require(membership, "view", "model masters")
    model_id = slug.replace("--", "/")
    master = ModelMaster.objects.filter(
        organization=membership.organization, model_id=model_id
    ).first()
    if master is None:
        raise Http404(f"No model master for {model_id!r} in {membership.organization}.")
    require(membership, action, "model masters")
    return master
