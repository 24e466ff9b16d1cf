"""Every change the gateway caches bumps the change counter, so each gateway process reloads."""

from django.db.models.signals import m2m_changed, post_delete, post_save

from accesspolicies.models import AccessPolicy, APIKey, ChangeCounter, VerifiedDomain


def _bump(sender, **kwargs) -> None:
    ChangeCounter.bump()


def connect() -> None:
    for model in (APIKey, AccessPolicy, VerifiedDomain):
        post_save.connect(_bump, sender=model, dispatch_uid=f"gateway-bump-save-{model.__name__}")
        post_delete.connect(
            _bump, sender=model, dispatch_uid=f"gateway-bump-delete-{model.__name__}"
        )
    m2m_changed.connect(_bump, sender=AccessPolicy.keys.through, dispatch_uid="gateway-bump-m2m")
