"""The model masters' shortcut over the one access decision (`ModelMaster.objects
.get_for_member`): in the member's organisation or 404; role or 403."""

from models_catalog.models import ModelMaster


def get_master(membership, slug: str, action: str = "view") -> ModelMaster:
    return ModelMaster.objects.object_for_member(membership, slug, action)
